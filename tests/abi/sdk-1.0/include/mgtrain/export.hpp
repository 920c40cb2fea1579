#pragma once
// libmgtrain is built with hidden visibility: it exports what a plugin uses, marked MGT_API, and
// nothing else. Classes whose objects or exceptions cross the plugin boundary are marked too, so
// that their type information is one object and catch and dynamic_cast work between libraries.
#if defined(__GNUC__)
#define MGT_API __attribute__((visibility("default")))
#else
#define MGT_API
#endif

// The SDK's value types that may grow (LayerHints, HintQuery, ChannelTensors, ActivationLayout)
// start with `uint32_t size`, the sizeof of the side that filled them, and gain fields only at
// their end: MGT_HAS_FIELD(s, field) says whether that side's struct has `field`. (Needs
// <cstddef> and <type_traits>.)
#define MGT_HAS_FIELD(s, field) ((s).size >= offsetof(std::remove_cvref_t<decltype(s)>, field) + sizeof((s).field))
