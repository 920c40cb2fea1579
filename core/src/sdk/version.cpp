#include "mgtrain/version.hpp"
