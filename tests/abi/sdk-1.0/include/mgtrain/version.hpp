#pragma once
#define MGTRAIN_VERSION "1.0.0"
