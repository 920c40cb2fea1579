// A shared library in the plugin folder that exports no descriptor.
extern "C" int mgtrain_not_a_plugin() { return 1; }
