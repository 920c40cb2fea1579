// Config parsing, overrides and validation against key tables.
#include <gtest/gtest.h>

#include <set>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "runtime/core_keys.hpp"

using namespace mgt;

namespace {
const std::vector<ConfigKey> kKeys = {
    {"optimizer.lr", KeyType::positive_real, "0.1", "learning rate"},
    {"model.hidden", KeyType::integer_list, "256,128", "hidden sizes"},
    {"model.name", KeyType::string, nullptr, "model"},
    {"train.nesterov", KeyType::boolean, "false", "flag"},
};

std::string error_of(Config c) {
  try {
    c.validate(kKeys);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, ParsesSectionsCommentsAndOverrides) {
  Config c = Config::from_string("# run\n[model]\nname = mlp  # inline\nhidden=64,32\n\n[optimizer]\n; x\nlr = 0.5\n",
                                 "run.ini");
  c.set("optimizer.lr", "0.25", "command line");
  c.validate(kKeys);
  EXPECT_EQ(c.get_string("model.name"), "mlp");
  EXPECT_EQ(c.get_int_list("model.hidden"), (std::vector<int64_t>{64, 32}));
  EXPECT_DOUBLE_EQ(c.get_real("optimizer.lr"), 0.25);
  EXPECT_FALSE(c.get_bool("train.nesterov"));  // default filled
  EXPECT_EQ(c.values().at("train.nesterov").source, "default");
}

TEST(Config, ALineEndingInABackslashGoesOnWithTheNext) {
  const Config c =
      Config::from_string("[model]\nlayers = conv 8 k3, \\\n    relu, \\\n  linear 10\nname = layers\n", "run.ini");
  EXPECT_EQ(c.get_string("model.layers"), "conv 8 k3, relu, linear 10");
  EXPECT_EQ(c.get_string("model.name"), "layers");
  // The value's source is its first line; the keys after it keep their own line numbers.
  EXPECT_EQ(c.values().at("model.layers").source, "run.ini:2");
  EXPECT_EQ(c.values().at("model.name").source, "run.ini:5");
}

TEST(Config, ToIniRoundTrips) {
  Config c = Config::from_string("[model]\nname = mlp\n[optimizer]\nlr = 0.5\n", "a.ini");
  c.validate(kKeys);
  Config back = Config::from_string(c.to_ini(), "stored");
  back.validate(kKeys);
  EXPECT_EQ(back.to_ini(), c.to_ini());
}

TEST(Config, RefusesOverridesThatTheStoredIniCannotKeep) {
  for (const char* bad : {"mlp # x", "mlp\nname = cnn", " mlp", "mlp\t;y"}) {
    Config c = Config::from_string("[optimizer]\nlr = 0.5\n", "a.ini");
    c.set("model.name", bad, "command line");
    const auto msg = error_of(c);
    EXPECT_NE(msg.find("config key 'model.name' (command line): the value holds"), std::string::npos) << msg;
  }
  Config fine = Config::from_string("[optimizer]\nlr = 0.5\n", "a.ini");
  fine.set("model.name", "my#model;v2", "command line");  // markers without a blank before them
  fine.validate(kKeys);
  EXPECT_EQ(Config::from_string(fine.to_ini(), "stored").get_string("model.name"), "my#model;v2");
}

TEST(Config, UnknownKeyNamesKeySourceAndKnownKeys) {
  const auto msg = error_of(Config::from_string("[model]\nname = mlp\nhiden = 3\n", "run.ini"));
  EXPECT_NE(msg.find("unknown config key 'model.hiden'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run.ini:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.hidden"), std::string::npos) << msg;
}

TEST(Config, NegativeAndNonNumericLearningRateAreRefused) {
  for (const char* bad : {"-0.1", "abc", "0", "nan"}) {
    Config c = Config::from_string("[model]\nname = mlp\n", "run.ini");
    c.set("optimizer.lr", bad, "command line");
    const auto msg = error_of(c);
    EXPECT_NE(msg.find("'optimizer.lr' (command line): expected a positive number, got '" + std::string(bad) + "'"),
              std::string::npos)
        << msg;
  }
}

TEST(Config, MissingRequiredKey) {
  const auto msg = error_of(Config::from_string("[optimizer]\nlr = 1\n", "run.ini"));
  EXPECT_NE(msg.find("'model.name' is required"), std::string::npos) << msg;
}

TEST(Config, SyntaxErrorsNameTheLine) {
  try {
    Config::from_string("[model]\nthis line has no equals\n", "bad.ini");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.ini:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Config::from_ini_file("/nonexistent/run.ini"), ConfigError);
}

TEST(Config, CoreKeysHaveHelpAndUniqueNames) {
  std::set<std::string> names;
  for (const auto& k : core_config_keys()) {
    EXPECT_TRUE(names.insert(k.key).second) << k.key;
    EXPECT_GT(std::string(k.help).size(), 5u) << k.key;
    if (k.default_value) {  // every default satisfies its own type
      Config c;
      c.set(k.key, k.default_value, "default");
      std::vector<ConfigKey> one = {k};
      EXPECT_NO_THROW(c.validate(one)) << k.key;
    }
  }
}

#include "runtime/lr_schedule.hpp"

namespace {
// A built-in schedule set up for base rate `base`, `warmup` warm-up steps and a run of `total`
// steps (of train.epochs' `horizon`, where given).
std::unique_ptr<LearningRateSchedule> builtin(const std::string& name, double base, int64_t warmup, int64_t total,
                                              int64_t horizon = 0) {
  auto schedule = make_builtin_schedule(name);
  ScheduleRun run;
  run.base_rate = base;
  run.warmup_steps = warmup;
  run.horizon_steps = horizon > 0 ? horizon : total;
  run.run_steps = total;
  schedule->setup(run);
  return schedule;
}
}  // namespace

TEST(Config, LearningRateSchedules) {
  const auto constant = builtin("constant", 0.1, 0, 100);
  EXPECT_DOUBLE_EQ(constant->rate(0), 0.1);
  EXPECT_DOUBLE_EQ(constant->rate(99), 0.1);
  const auto warm = builtin("constant", 0.1, 4, 100);
  EXPECT_DOUBLE_EQ(warm->rate(0), 0.025);
  EXPECT_DOUBLE_EQ(warm->rate(3), 0.1);
  EXPECT_DOUBLE_EQ(warm->rate(4), 0.1);
  const auto cosine = builtin("cosine", 0.2, 10, 110);
  EXPECT_DOUBLE_EQ(cosine->rate(10), 0.2);
  EXPECT_NEAR(cosine->rate(60), 0.1, 1e-12);
  EXPECT_NEAR(cosine->rate(110), 0.0, 1e-12);
  EXPECT_GT(cosine->rate(30), cosine->rate(31));
  // Capped by train.max_steps at 110 of train.epochs' 1000 steps: 0 at the run's end, not at 1000.
  const auto capped = builtin("cosine", 0.2, 10, 110, 1000);
  EXPECT_NEAR(capped->rate(60), 0.1, 1e-12);
  EXPECT_NEAR(capped->rate(110), 0.0, 1e-12);
  EXPECT_THROW(make_builtin_schedule("linear"), ConfigError);
  EXPECT_TRUE(is_builtin_schedule("cosine"));
  EXPECT_FALSE(is_builtin_schedule("wsd"));
}

TEST(Config, ChoiceKeysAcceptOnlyTheirValues) {
  const std::vector<ConfigKey> keys = {{"train.nonfinite", KeyType::choice, "abort", "policy", "abort|skip"}};
  Config ok;
  ok.set("train.nonfinite", "skip", "command line");
  EXPECT_NO_THROW(ok.validate(keys));
  Config bad;
  bad.set("train.nonfinite", "ignore", "command line");
  try {
    bad.validate(keys);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("expected abort or skip, got 'ignore'"), std::string::npos) << e.what();
  }
}

namespace {
std::string parse_error(const std::string& ini) {
  try {
    Config::from_string(ini, "run.ini");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, ADuplicateKeyIsRefusedNamingBothLines) {
  const auto msg = parse_error("[optimizer]\nlr = 0.1\nmomentum = 0.9\nlr = 0.5\n");
  EXPECT_EQ(msg, "run.ini:4: config key 'optimizer.lr' is set twice (first at run.ini:2); keep one of the two lines");
  // The same key spelt in full under another section is the same key.
  const auto dotted = parse_error("[optimizer]\nlr = 0.1\n[train]\noptimizer.lr = 0.5\n");
  EXPECT_NE(dotted.find("run.ini:4: config key 'optimizer.lr' is set twice (first at run.ini:2)"), std::string::npos)
      << dotted;
}

TEST(Config, ASectionTwiceIsRefusedNamingBothLines) {
  const auto msg = parse_error("[optimizer]\nlr = 0.1\n[model]\nname = mlp\n[optimizer]\nmomentum = 0.9\n");
  EXPECT_NE(msg.find("run.ini:5: section [optimizer] appears twice (first at run.ini:1)"), std::string::npos) << msg;
}

// A continued line that would swallow a section header is refused at the backslash's line,
// rather than its keys landing in the section before it ("model.name is set twice").
TEST(Config, ABackslashNeverContinuesIntoASectionHeader) {
  EXPECT_EQ(parse_error("[model]\nname = mlp \\\n[optimizer]\nname = sgd\n"),
            "run.ini:2: the trailing backslash continues this line into the section header '[optimizer]' on line 3; "
            "remove the backslash (a section header cannot continue a value)");
  // After continued lines, the line that ends in the backslash before the header.
  EXPECT_EQ(parse_error("[model]\nlayers = conv 8 k3, \\\n  relu, \\\n  [train]\nepochs = 1\n"),
            "run.ini:3: the trailing backslash continues this line into the section header '[train]' on line 4; "
            "remove the backslash (a section header cannot continue a value)");
}

TEST(Config, RealsMustFitTheFloatTheyAreUsedAs) {
  for (const char* bad : {"1e300", "3.5e38", "1e-50"}) {
    Config c = Config::from_string("[model]\nname = mlp\n", "run.ini");
    c.set("optimizer.lr", bad, "command line");
    const auto msg = error_of(c);
    EXPECT_NE(msg.find("config key 'optimizer.lr' (command line): expected a positive number that"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("32-bit float"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("got '") + bad + "'"), std::string::npos) << msg;
  }
  Config largest = Config::from_string("[model]\nname = mlp\n", "run.ini");
  largest.set("optimizer.lr", "3.4e38", "command line");
  EXPECT_NO_THROW(largest.validate(kKeys));
  const std::vector<ConfigKey> any_real = {{"model.shift", KeyType::real, "0", "a real"}};
  Config negative;
  negative.set("model.shift", "-1e39", "command line");
  EXPECT_THROW(negative.validate(any_real), ConfigError);
}

TEST(Config, IntegersMustFitTheirType) {
  const std::vector<ConfigKey> keys = {{"train.epochs", KeyType::positive_integer, "1", "epochs"}};
  Config c;
  c.set("train.epochs", "99999999999999999999", "command line");  // past int64
  EXPECT_THROW(c.validate(keys), ConfigError);
}

TEST(Config, CoreKeysUsedAsNarrowerTypesAreBounded) {
  auto range_error = [](const char* key, const char* value) {
    Config c;
    c.set(key, value, "command line");
    try {
      check_core_key_ranges(c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(range_error("comm.timeout_s", "1e30"),
            "config key 'comm.timeout_s' (command line): expected at most 1e+09 (it is used as a deadline on the "
            "steady clock), got '1e30'");
  EXPECT_NE(range_error("data.prefetch", "3000000000").find("expected at most 2.14748e+09"), std::string::npos);
  EXPECT_NE(range_error("train.epochs", "3000000000").find("train.epochs"), std::string::npos);
  EXPECT_EQ(range_error("comm.timeout_s", "300"), "");
  EXPECT_EQ(range_error("data.prefetch", "3"), "");
}

TEST(Config, ADirectoryOrMissingFileIsNamedWithTheReason) {
  try {
    Config::from_ini_file("/tmp");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config file '/tmp' cannot be read: Is a directory (expected an INI file)");
  }
  try {
    Config::from_ini_file("/nonexistent/run.ini");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config file '/nonexistent/run.ini' cannot be opened: No such file or directory");
  }
}

TEST(Config, ControlBytesInAValueAreEscapedAndANulDoesNotCutTheMessage) {
  const std::string ini = std::string("[model]\nname = mlp\n[optimizer]\nlr = 0.1") + '\0' + "x\x1b[2J\n";
  const auto msg = error_of(Config::from_string(ini, "run.ini"));
  EXPECT_NE(msg.find("got '0.1\\x00x\\x1b[2J'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\x1b'), std::string::npos);
  // Escaping is idempotent: an error re-raised with another's message stays the same.
  EXPECT_EQ(ConfigError(msg).what(), msg);
  EXPECT_EQ(printable(std::string("a\nb\tc\x7f\\x")), "a\\x0ab\\x09c\\x7f\\x");
}
