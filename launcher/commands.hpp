#pragma once
// One function per `mgtrain` subcommand; each returns the process exit code.
#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace mgt::cli {

// --allow-unchecked, for every command that reads a checkpoint: one older than the attribute
// checksums is read rather than refused (allow_unchecked_checkpoints). Apply after parsing.
void add_allow_unchecked_option(boost::program_options::options_description& desc);
void apply_allow_unchecked_option(const boost::program_options::variables_map& vm);

int run_train(int argc, char** argv, const std::vector<std::string>& args);
// `mgtrain launch ... -- train ...`: the supervisor that restarts a job on the nodes left.
int run_launch(const std::vector<std::string>& args);
int run_bench(int argc, char** argv, const std::vector<std::string>& args);
int run_verify(int argc, char** argv, const std::vector<std::string>& args);
int run_doctor(int argc, char** argv, const std::vector<std::string>& args);
// `mgtrain doctor`: replaces this process with mgtrain-doctor from the same directory (argv kept),
// the one executable that links the GPU libraries. Returns only on failure.
int exec_doctor(char** argv);
int run_eval(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
int run_data(const std::vector<std::string>& args);
int run_compare(const std::vector<std::string>& args);
int run_plugins(const std::vector<std::string>& args);
int run_config_keys(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);

}  // namespace mgt::cli
