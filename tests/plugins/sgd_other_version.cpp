// The real `sgd` optimizer under another version number: a rank that loads it while the others
// load the shipped one must be refused at start-up (plugin versions differ).
#include "mgtrain/plugin.hpp"

#undef MGT_OPTIMIZER_PLUGIN
#define MGT_OPTIMIZER_PLUGIN(NAME, VERSION, DESCRIPTION, KEYS, TYPE) \
  MGT_PLUGIN_IMPL("optimizer", ::mgt::Optimizer, NAME, "1.0.1-test", DESCRIPTION, KEYS, TYPE)

#include "plugins/optimizers/sgd/sgd.cpp"
