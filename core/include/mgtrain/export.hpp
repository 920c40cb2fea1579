#pragma once
// libmgtrain is built with hidden visibility: it exports what a plugin uses, marked MGT_API, and
// nothing else. Classes whose objects or exceptions cross the plugin boundary are marked too, so
// that their type information is one object and catch and dynamic_cast work between libraries.
#if defined(__GNUC__)
#define MGT_API __attribute__((visibility("default")))
#else
#define MGT_API
#endif
