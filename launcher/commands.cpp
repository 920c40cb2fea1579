// `mgtrain eval`, `export`, `data`, `plugins` and `config-keys`: single-process commands, no MPI.
#include <boost/program_options.hpp>

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/atomic_file.hpp"
#include "checkpoint/checkpoint.hpp"
#include "command_line_config.hpp"
#include "commands.hpp"
#include "datasets/convert.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/token_file.hpp"
#include "datasets/tokenizer.hpp"
#include "io/json_line.hpp"
#include "io/printable_stream.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/error.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/result_json.hpp"
#include "tools/checkpoint_compare.hpp"
#include "tools/generate.hpp"
#include "tools/onnx_check.hpp"
#include "tools/onnx_export.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description* positional = nullptr) {
  po::command_line_parser parser(args);
  parser.options(desc);
  if (positional) parser.positional(*positional);
  const po::parsed_options parsed = parser.run();
  // Without a positional description boost keeps a bare word under no name, and store() drops it.
  for (const auto& opt : parsed.options)
    if (opt.string_key.empty())
      throw po::error("unexpected argument '" + (opt.original_tokens.empty() ? std::string() : opt.original_tokens[0]) +
                      "'");
  po::variables_map vm;
  po::store(parsed, vm);
  po::notify(vm);
  return vm;
}

std::vector<std::string> plugin_paths(const po::variables_map& vm) {
  return vm.count("plugin-path") ? vm["plugin-path"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

}  // namespace

void add_allow_unchecked_option(po::options_description& desc) {
  desc.add_options()("allow-unchecked", po::bool_switch(),
                     "read a checkpoint written before attribute checksums (format_version 1 without "
                     "attributes_crc32), whose step, config and attributes cannot be verified");
}

void apply_allow_unchecked_option(const po::variables_map& vm) {
  allow_unchecked_checkpoints(vm.count("allow-unchecked") && vm["allow-unchecked"].as<bool>());
}

namespace {

std::string require(const po::variables_map& vm, const char* name, const char* command) {
  if (!vm.count(name))
    throw ConfigError(std::string(command) + ": --" + name + " is required (see mgtrain " + command + " --help)");
  return vm[name].as<std::string>();
}

Shape parse_shape(const std::string& text) {
  Shape shape;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      shape.push_back(std::stoll(item));
    } catch (const std::exception&) {
      throw ConfigError("--shape: expected comma-separated integers like 1,28,28, got '" + text + "'");
    }
  }
  return shape;
}

// --size S (S x S) or HxW (height x width).
std::pair<int64_t, int64_t> parse_image_size(const std::string& text) {
  const std::string expected =
      "data convert: --size: expected a size like 32 or 32x48 (height x width), got '" + text + "'";
  auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 6 || part.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError(expected);
    const int64_t v = std::stoll(part);
    if (v < 1 || v > 65536) throw ConfigError(expected + "; each size must be 1 to 65536");
    return v;
  };
  const size_t x = text.find_first_of("xX");
  if (x == std::string::npos) {
    const int64_t s = number(text);
    return {s, s};
  }
  return {number(text.substr(0, x)), number(text.substr(x + 1))};
}

// A whole non-negative decimal integer of at most 18 digits (so it fits int64), for the options
// whose messages say what was expected instead of boost's "invalid argument".
int64_t parse_count(const std::string& text, const std::string& flag, const std::string& expected) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError(flag + ": expected " + expected + ", got '" + text + "'");
  return std::stoll(text);
}

double parse_temperature(const std::string& text) {
  const std::string expected =
      "generate: --temperature: expected a finite number >= 0 (0: always the most likely token), got '" + text + "'";
  char* end = nullptr;
  errno = 0;
  const double value = text.empty() ? std::nan("") : std::strtod(text.c_str(), &end);
  // strtod says ERANGE for a value too small for a normal double too (1e-320, 1e-400): harmless
  // here, a temperature that small samples the most likely token as 0 does. Too large is inf.
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value < 0) throw ConfigError(expected);
  return value;
}

}  // namespace

int run_eval(const std::vector<std::string>& args) {
  po::options_description desc("usage: mgtrain eval --checkpoint FILE --data FILE [options]\noptions");
  desc.add_options()("help", "show this help")(
      "checkpoint", po::value<std::string>(),
      "checkpoint file (step-<N>.h5), a run's latest or its checkpoint directory")("data", po::value<std::string>(),
                                                                                   "HDF5 data file to evaluate on")(
      "batch", po::value<int64_t>(),
      "samples per forward pass (default 1000; a language model's windows: as many as hold 4096 tokens, "
      "at least 1)")("json", po::bool_switch(), "print one JSON line")(
      "logits", po::value<std::string>(),
      "write every row's logits to this .npy file (float32 [N, classes]; a token file's windows: [N, T, "
      "vocab]; the data file's row order)")("plugin-path", po::value<std::vector<std::string>>()->composing(),
                                            "extra plugin directory");
  add_allow_unchecked_option(desc);
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  apply_allow_unchecked_option(vm);
  const std::string checkpoint = resolve_checkpoint(require(vm, "checkpoint", "eval"));
  const std::string data = require(vm, "data", "eval");
  const int64_t batch = vm.count("batch") ? vm["batch"].as<int64_t>() : 0;  // 0: the model's default
  if (vm.count("batch") && batch <= 0)
    throw ConfigError("eval: --batch must be positive, got " + std::to_string(batch));
  const std::string logits = vm.count("logits") ? vm["logits"].as<std::string>() : "";
  if (!logits.empty()) refuse_output_that_is_input("eval: --logits", logits, {checkpoint, data});
  const EvalResult r = evaluate_checkpoint(checkpoint, data, plugin_paths(vm), batch, logits);
  if (vm["json"].as<bool>())
    std::printf("%s\n", eval_result_json(r).c_str());
  else if (r.tokens > 0 && r.masked)
    std::printf(
        "masked-token loss %.4f nats/token  perplexity %.3f  masked-token accuracy %.4f  masked tokens %lld  "
        "(%s on %s)\n",
        r.loss, std::exp(r.loss), r.accuracy, static_cast<long long>(r.tokens), printable(checkpoint).c_str(),
        printable(data).c_str());
  else if (r.tokens > 0)
    std::printf("loss %.4f nats/token  perplexity %.3f  bits/%s %.4f  token accuracy %.4f  tokens %lld  (%s on %s)\n",
                r.loss, std::exp(r.loss), bits_unit(data), r.loss / std::log(2.0), r.accuracy,
                static_cast<long long>(r.tokens), printable(checkpoint).c_str(), printable(data).c_str());
  else
    std::printf("accuracy %.4f  loss %.4f  samples %lld  (%s on %s)\n", r.accuracy, r.loss,
                static_cast<long long>(r.samples), printable(checkpoint).c_str(), printable(data).c_str());
  return 0;
}

int run_export(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mgtrain export --checkpoint FILE --out MODEL.onnx [options]\n"
      "  The checkpoint's model as ONNX (opset 17): input \"input\", float32 [N, ...sample shape], the\n"
      "  samples as the data file stores them (uint8 pixels as 0..255), normalised in the graph as the\n"
      "  data reader does; output \"logits\" [N, classes]; N is free. Batch norm runs on its running\n"
      "  statistics, dropout is the identity. A language model (gpt) takes \"input\", int64 token ids [N, T]\n"
      "  (T from 1 to its context), and gives \"logits\" [N, T, vocab]. A layer or model with no ONNX form is\n"
      "  refused by name. Before writing, the graph is run on a sample batch (the data file's first 4\n"
      "  samples; 2 windows of random token ids) by mgtrain's own evaluator and compared with the model's\n"
      "  forward at every layer's output: a layer whose output differs by more than 1e-4 of its largest\n"
      "  |value| is refused by name (docs/models.md, \"Export to ONNX\").\n"
      "options");
  desc.add_options()("help", "show this help")(
      "checkpoint", po::value<std::string>(),
      "checkpoint file (step-<N>.h5), a run's latest or its checkpoint directory")(
      "out", po::value<std::string>(), "ONNX file to write (under a temporary name, renamed when complete)")(
      "data", po::value<std::string>(),
      "data file giving the sample shape and normalisation (default: the checkpoint's data.train; eval "
      "normalises each file by its own statistics); a language model needs none, a token file named is checked")(
      "plugin-path", po::value<std::vector<std::string>>()->composing(), "extra plugin directory")(
      "no-check", po::bool_switch(),
      "write the graph without running it against the model's forward first (a model too large for the "
      "check's plain loops)");
  add_allow_unchecked_option(desc);
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  apply_allow_unchecked_option(vm);
  const std::string checkpoint = resolve_checkpoint(require(vm, "checkpoint", "export"));
  const std::string out = require(vm, "out", "export");
  const std::string data = vm.count("data") ? vm["data"].as<std::string>() : "";
  refuse_output_that_is_input("export: --out", out, {checkpoint, data});
  const OnnxExport e = export_onnx(checkpoint, out, data, plugin_paths(vm), !vm["no-check"].as<bool>());
  if (e.onnx.context > 0)
    std::printf(
        "wrote %s: model %s, %lld nodes; input \"input\" int64 [N, T] token ids, T from 1 to %lld; output "
        "\"logits\" [N, T, %lld]\n",
        printable(out).c_str(), printable(e.model_name).c_str(), static_cast<long long>(e.onnx.nodes),
        static_cast<long long>(e.onnx.context), static_cast<long long>(e.onnx.classes));
  else
    std::printf(
        "wrote %s: model %s, %lld nodes; input \"input\" float32 [N, %s samples of %s, normalised in the "
        "graph: %s; output \"logits\" [N, %lld]\n",
        printable(out).c_str(), printable(e.model_name).c_str(), static_cast<long long>(e.onnx.nodes),
        shape_string(e.sample_shape).substr(1).c_str(), printable(e.data_path).c_str(), e.normalisation.text().c_str(),
        static_cast<long long>(e.onnx.classes));
  if (e.check.checked)
    std::printf(
        "checked: %lld layer outputs agree with the model's forward on %s, within %.2g of their largest "
        "|value| (at most %g)\n",
        static_cast<long long>(e.check.outputs), printable(e.check.sample).c_str(), e.check.largest,
        kOnnxCheckTolerance);
  else if (!e.check.not_checked.empty())
    std::fprintf(stderr,
                 "mgtrain: warning: the ONNX file was written unchecked: %s, which mgtrain's evaluator does "
                 "not compute (docs/models.md, \"Export to ONNX\")\n",
                 printable(e.check.not_checked).c_str());
  return 0;
}

int run_generate(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mgtrain generate --checkpoint FILE --prompt TEXT --tokens N [options]\n"
      "  A language model's checkpoint (model.name = gpt) continues the prompt by N tokens, written to\n"
      "  standard output as they are drawn: the generated bytes alone (exactly N), as raw bytes (byte\n"
      "  tokens: a token is a byte of the text), no newline added; --echo writes the prompt first.\n"
      "  Each token is drawn from softmax(logits / temperature), over the k most likely with --top-k,\n"
      "  by a counter-based random number of (seed, token index): the same seed gives the same text.\n"
      "  Past keys and values are kept, so a token costs one pass of one token after one pass over the\n"
      "  prompt. The model sees at most its context (model.context) tokens: a longer prompt keeps its\n"
      "  last ones, and once the window is full each new token pushes the oldest out and the cache is\n"
      "  computed again over the window, one pass over the context per token from then on.\n"
      "options");
  desc.add_options()("help", "show this help")(
      "checkpoint", po::value<std::string>(),
      "checkpoint of a language model (step-<N>.h5, a run's latest or its directory)")(
      "prompt", po::value<std::string>(), "text to continue (its bytes; --prompt=TEXT when it starts with -)")(
      "tokens", po::value<std::string>(), "tokens (bytes) to generate, a positive integer")(
      "temperature", po::value<std::string>()->default_value("1"),
      "softmax temperature, a finite number >= 0; 0: always the most likely token (greedy)")(
      "top-k", po::value<std::string>(), "draw only among the K most likely tokens (K >= 1; default: all)")(
      "seed", po::value<std::string>()->default_value("0"), "random seed, a non-negative integer")(
      "echo", po::bool_switch(), "write the prompt before its continuation")(
      "check-cache", po::bool_switch(),
      "self-check: for every token also run the model's forward over the whole window and stop with an "
      "error if the cached logits differ by more than 1e-4 of their largest magnitude (slow)")(
      "plugin-path", po::value<std::vector<std::string>>()->composing(), "extra plugin directory");
  add_allow_unchecked_option(desc);
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  apply_allow_unchecked_option(vm);
  GenerateOptions options;
  options.checkpoint = resolve_checkpoint(require(vm, "checkpoint", "generate"));
  options.prompt = require(vm, "prompt", "generate");
  const std::string tokens = require(vm, "tokens", "generate");
  options.tokens = parse_count(tokens, "generate: --tokens", "a positive integer");
  if (options.tokens < 1) throw ConfigError("generate: --tokens: expected a positive integer, got '" + tokens + "'");
  options.sampling.temperature = parse_temperature(vm["temperature"].as<std::string>());
  if (vm.count("top-k")) {
    const std::string k = vm["top-k"].as<std::string>();
    options.sampling.top_k = parse_count(k, "generate: --top-k", "an integer >= 1");
    if (options.sampling.top_k < 1) throw ConfigError("generate: --top-k: expected an integer >= 1, got '" + k + "'");
  }
  options.sampling.seed = static_cast<uint64_t>(
      parse_count(vm["seed"].as<std::string>(), "generate: --seed", "a non-negative integer of at most 18 digits"));
  options.echo = vm["echo"].as<bool>();
  options.check_cache = vm["check-cache"].as<bool>();
  options.plugin_paths = plugin_paths(vm);
  if (options.prompt.empty())
    throw ConfigError("generate: --prompt is empty: expected at least one byte for the model to continue");
  // Flushed per token, so the text appears as it is drawn.
  const GenerateSummary summary = generate_text(options, [](char byte) {
    std::fputc(static_cast<unsigned char>(byte), stdout);
    std::fflush(stdout);
  });
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw IoError("generate: cannot write the text to standard output: " + std::string(std::strerror(errno)));
  if (options.check_cache)
    std::fprintf(stderr,
                 "cache check: the logits for %lld tokens (%lld after the window slid) are within %.3g of the "
                 "model's forward over the same window, relative to the largest logit (at most %g allowed)\n",
                 static_cast<long long>(summary.checked), static_cast<long long>(summary.window_recomputations),
                 summary.largest_difference, kCacheTolerance);
  return 0;
}

int exec_doctor(char** argv) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) self = argv[0];
  const std::string doctor = (self.parent_path() / "mgtrain-doctor").string();
  execv(doctor.c_str(), argv);
  std::fprintf(stderr,
               "mgtrain: error: [rank %d] doctor: cannot run '%s': %s (it is installed next to "
               "mgtrain)\n",
               launch_rank(), doctor.c_str(), std::strerror(errno));
  return 1;
}

int run_data(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: mgtrain data convert --images IDX --labels IDX --out FILE.h5\n"
      "       mgtrain data convert --csv FILE --shape 1,28,28 [--label-column 0] --out FILE.h5\n"
      "       mgtrain data convert --image-folder DIR --size 32 [--channels 1|3] [--bad-images error|skip] --out "
      "FILE.h5\n"
      "       mgtrain data convert --text FILE [FILE...] [--tokenizer TOK.model] --out FILE.h5\n"
      "       mgtrain data tokenizer --text FILE [FILE...] --vocab N [--type bpe|unigram] --out TOK.model\n"
      "       mgtrain data inspect FILE.h5";
  if (args.empty() || args[0] == "--help") {
    std::cout << usage << "\n";
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "inspect") {
    po::options_description desc("usage: mgtrain data inspect FILE.h5\noptions");
    desc.add_options()("help", "show this help")("file", po::value<std::string>(), "HDF5 data file")(
        "x-name", po::value<std::string>()->default_value("x"), "samples dataset")(
        "y-name", po::value<std::string>()->default_value("y"), "labels dataset");
    po::positional_options_description positional;
    positional.add("file", 1);
    const auto vm = parse(rest, desc, &positional);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    const std::string file = require(vm, "file", "data inspect");
    if (data::is_token_file(file)) {
      std::cout << data::inspect_tokens(file);
      return 0;
    }
    std::cout << data::inspect(file, vm["x-name"].as<std::string>(), vm["y-name"].as<std::string>());
    return 0;
  }
  if (sub == "tokenizer") {
    po::options_description desc(
        "usage: mgtrain data tokenizer --text FILE [FILE...] --vocab N [--type bpe|unigram] --out TOK.model\n"
        "  trains a SentencePiece model on the text (lossless: the newline and every byte round-trip);\n"
        "  the same text and options give the same bytes. `data convert --tokenizer` then uses it.\n"
        "options");
    desc.add_options()("help", "show this help")("text", po::value<std::vector<std::string>>()->multitoken(),
                                                 "text files, in order")(
        "vocab", po::value<std::string>(), "vocabulary size")("type", po::value<std::string>()->default_value("bpe"),
                                                              "bpe or unigram")("out", po::value<std::string>(),
                                                                                "model file to write");
    const auto vm = parse(rest, desc);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    const std::string out = require(vm, "out", "data tokenizer");
    data::TokenizerTraining training;
    training.files = vm.count("text") ? vm["text"].as<std::vector<std::string>>() : std::vector<std::string>{};
    const std::string range =
        std::to_string(data::kMinTokenizerVocab) + " to " + std::to_string(data::kMaxTokenizerVocab);
    training.vocab =
        parse_count(require(vm, "vocab", "data tokenizer"), "data tokenizer: --vocab", "an integer from " + range);
    training.type = vm["type"].as<std::string>();
    refuse_output_that_is_input("data tokenizer: --out", out, training.files);
    AtomicFile file(out, "tokenizer file");  // an output that cannot be written is refused before training
    const std::string model = data::train_tokenizer(training);
    file.commit(model);
    std::cout << "wrote " << printable(out) << ": " << training.type << " tokenizer of " << training.vocab
              << " pieces, " << model.size() << " bytes, SHA-256 " << data::tokenizer_sha256(model) << "\n";
    return 0;
  }
  if (sub == "convert") {
    po::options_description desc(
        "usage: mgtrain data convert (IDX | CSV | image folder) --out FILE.h5\n"
        "  IDX:          --images IDX --labels IDX [--class-names A,B,...]\n"
        "  CSV:          --csv FILE --shape 1,28,28 [--label-column 0]\n"
        "  image folder: --image-folder DIR --size 32 [--channels 1|3] [--bad-images error|skip]\n"
        "  text:         --text FILE [FILE...]: byte tokens (vocabulary 256) in /tokens, the files\n"
        "    concatenated in order, for a language model (model.name = gpt)\n"
        "    DIR/<class>/<images>, torchvision's ImageFolder layout: the class folders, sorted by name, are\n"
        "    the labels 0, 1, ... and their names the class_names; *.png, *.jpg and *.jpeg files (also in\n"
        "    sub-folders) are the samples, other files and hidden ones are ignored. Each image is scaled,\n"
        "    keeping its aspect ratio, until it covers the size, then its middle is kept (torchvision's\n"
        "    Resize + CenterCrop): a non-square image loses the edges of its longer side, never stretched.\n"
        "    /x is uint8 [N, C, H, W] with per-channel mean and std. A bad image (corrupt, truncated,\n"
        "    CMYK, 16-bit, another format) stops the conversion naming it, or with --bad-images skip is\n"
        "    left out with a warning naming it.\n"
        "options");
    desc.add_options()("help", "show this help")("images", po::value<std::string>(), "IDX images file (gzip or plain)")(
        "labels", po::value<std::string>(), "IDX labels file (gzip or plain)")("class-names", po::value<std::string>(),
                                                                               "comma-separated class names to store")(
        "csv", po::value<std::string>(), "CSV file, one sample per row")(
        "label-column", po::value<int>()->default_value(0), "CSV column holding the label")(
        "shape", po::value<std::string>(), "CSV sample shape, e.g. 1,28,28 or 784")(
        "image-folder", po::value<std::string>(), "folder of class folders of PNG/JPEG images")(
        "size", po::value<std::string>(), "image size: S (S x S) or HxW (height x width), e.g. 32 or 32x48")(
        "channels", po::value<int>(),
        "image channels: 1 (colour made grey) or 3 (grey repeated); default 3 when any "
        "image is colour, else 1")("bad-images", po::value<std::string>()->default_value("error"),
                                   "error: stop at the first bad image; skip: leave bad images out, warning for each")(
        "text", po::value<std::vector<std::string>>()->multitoken(), "text files, concatenated in order")(
        "tokenizer", po::value<std::string>(),
        "with --text: a SentencePiece model (`mgtrain data tokenizer`) whose ids to write, uint16 (uint32 past "
        "65,536 pieces), the model stored in the file; default: byte tokens")("out", po::value<std::string>(),
                                                                              "HDF5 file to write");
    const auto vm = parse(rest, desc);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    const std::string out = require(vm, "out", "data convert");
    // One input a conversion: the others would be left out without a word.
    std::vector<std::string> kinds;
    if (vm.count("text")) kinds.push_back("--text");
    if (vm.count("csv")) kinds.push_back("--csv");
    if (vm.count("image-folder")) kinds.push_back("--image-folder");
    if (vm.count("images") || vm.count("labels")) kinds.push_back(vm.count("images") ? "--images" : "--labels");
    if (kinds.size() > 1) {
      std::string given = kinds[0];
      for (size_t i = 1; i < kinds.size(); ++i) given += (i + 1 == kinds.size() ? " and " : ", ") + kinds[i];
      throw ConfigError("data convert: give one input, got " + given +
                        " (--text, --csv, --image-folder or --images with --labels: one file a conversion)");
    }
    // The files read, which --out must not be.
    std::vector<std::string> inputs =
        vm.count("text") ? vm["text"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (vm.count("tokenizer") && !vm.count("text"))
      throw ConfigError("data convert: --tokenizer goes with --text (it encodes text), got no --text");
    for (const char* input : {"csv", "images", "labels", "tokenizer"})
      if (vm.count(input)) inputs.push_back(vm[input].as<std::string>());
    refuse_output_that_is_input("data convert: --out", out, inputs);
    if (vm.count("text")) {
      std::optional<data::Tokenizer> tokenizer;
      if (vm.count("tokenizer")) tokenizer.emplace(data::Tokenizer::from_file(vm["tokenizer"].as<std::string>()));
      int64_t tokens = 0;
      const auto sources = data::convert_text(vm["text"].as<std::vector<std::string>>(), out,
                                              tokenizer ? &*tokenizer : nullptr, &tokens);
      int64_t bytes = 0;
      for (const auto& s : sources) bytes += s.bytes;
      if (tokenizer)
        std::cout << "wrote " << printable(out) << ": " << tokens << " tokens (vocabulary " << tokenizer->vocab_size()
                  << ") from " << bytes << " bytes of " << sources.size() << (sources.size() == 1 ? " file" : " files")
                  << "\n";
      else
        std::cout << "wrote " << printable(out) << ": " << tokens << " byte tokens from " << sources.size()
                  << (sources.size() == 1 ? " file" : " files") << "\n";
      return 0;
    }
    if (vm.count("image-folder")) {
      data::ImageFolderOptions options;
      std::tie(options.height, options.width) = parse_image_size(require(vm, "size", "data convert --image-folder"));
      if (vm.count("channels")) {
        options.channels = vm["channels"].as<int>();
        if (options.channels != 1 && options.channels != 3)
          throw ConfigError("data convert: --channels must be 1 or 3, got " + std::to_string(options.channels));
      }
      const std::string bad = vm["bad-images"].as<std::string>();
      if (bad != "error" && bad != "skip")
        throw ConfigError("data convert: --bad-images must be error or skip, got '" + bad + "'");
      options.bad_images = bad == "skip" ? data::BadImages::skip : data::BadImages::error;
      const auto summary = data::convert_image_folder(
          vm["image-folder"].as<std::string>(), out, options,
          [](const std::string& line) { std::fprintf(stderr, "mgtrain: warning: %s\n", printable(line).c_str()); });
      if (summary.skipped > 0)
        std::fprintf(stderr, "mgtrain: warning: skipped %lld bad image%s (named above); wrote %lld\n",
                     static_cast<long long>(summary.skipped), summary.skipped == 1 ? "" : "s",
                     static_cast<long long>(summary.images));
      std::cout << "wrote " << printable(out) << ": " << summary.images << " images of " << summary.channels << "x"
                << options.height << "x" << options.width << ", " << summary.class_names.size() << " classes";
      if (summary.ignored > 0)
        std::cout << " (" << summary.ignored << (summary.ignored == 1 ? " file" : " files")
                  << " ignored: not .png, .jpg or .jpeg)";
      std::cout << "\n";
      return 0;
    } else if (vm.count("csv")) {
      data::convert_csv(vm["csv"].as<std::string>(), out, vm["label-column"].as<int>(),
                        parse_shape(require(vm, "shape", "data convert --csv")));
    } else if (vm.count("images") || vm.count("labels")) {
      std::vector<std::string> names;
      if (vm.count("class-names")) {
        std::stringstream ss(vm["class-names"].as<std::string>());
        std::string item;
        while (std::getline(ss, item, ',')) names.push_back(item);
      }
      data::convert_idx(require(vm, "images", "data convert"), require(vm, "labels", "data convert"), out, names);
    } else {
      throw ConfigError(
          "data convert: give --images and --labels (IDX), --csv and --shape (CSV) or --image-folder and --size");
    }
    std::cout << "wrote " << printable(out) << "\n";
    return 0;
  }
  throw ConfigError("data: unknown subcommand '" + sub + "' (expected convert or inspect)");
}

int run_plugins(const std::vector<std::string>& args) {
  po::options_description desc("usage: mgtrain plugins [--plugin-path DIR]\noptions");
  desc.add_options()("help", "show this help")("plugin-path", po::value<std::vector<std::string>>()->composing(),
                                               "extra plugin directory");
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  PluginRegistry registry(plugin_paths(vm));
  std::cout << "search path:\n";
  for (const auto& d : registry.search_dirs()) std::cout << "  " << printable(d) << "\n";
  std::printf("%-10s %-12s %-8s %s\n", "KIND", "NAME", "VERSION", "PATH");
  std::vector<PluginCandidate> refused;
  for (const auto& c : registry.scan()) {
    if (!c.usable) {
      refused.push_back(c);
      continue;
    }
    std::printf("%-10s %-12s %-8s %s\n", printable(c.kind).c_str(), printable(c.name).c_str(),
                printable(c.version).c_str(), printable(c.path).c_str());
  }
  for (const auto& c : refused)
    std::printf("refused: %s: %s\n", printable(c.path).c_str(), printable(c.refusal).c_str());
  return 0;
}

int run_compare(const std::vector<std::string>& args) {
  po::options_description desc("usage: mgtrain compare A.h5 B.h5 [--rtol R] [--params-only]\noptions");
  desc.add_options()("help", "show this help")("a", po::value<std::string>(), "first checkpoint")(
      "b", po::value<std::string>(), "second checkpoint")(
      "rtol", po::value<double>()->default_value(0.0),
      "tolerance relative to each tensor's largest value (0: bit for bit)")(
      "params-only", po::bool_switch(), "compare the parameters alone, not buffers, optimizer and sync state");
  add_allow_unchecked_option(desc);
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  const auto vm = parse(args, desc, &positional);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  apply_allow_unchecked_option(vm);
  // Its lines quote the checkpoints' paths and tensor names.
  PrintableStream out(std::cout);
  return compare_checkpoints(resolve_checkpoint(require(vm, "a", "compare")),
                             resolve_checkpoint(require(vm, "b", "compare")), vm["rtol"].as<double>(),
                             vm["params-only"].as<bool>(), out)
             ? 0
             : 1;
}

int run_config_keys(const std::vector<std::string>& args) {
  po::options_description desc("usage: mgtrain config-keys [--plugin-path DIR]\noptions");
  desc.add_options()("help", "show this help")("plugin-path", po::value<std::vector<std::string>>()->composing(),
                                               "extra plugin directory");
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  auto row = [](const ConfigKey& k, const std::string& owner) {
    std::string type = key_type_name(k.type);
    if (k.type == KeyType::choice && k.choices) {
      type += ": ";
      for (const char* c = k.choices; *c; ++c) type += *c == '|' ? std::string(", ") : std::string(1, *c);
    }
    // A plugin's keys come from its file.
    std::printf("| `%s` | %s | %s | %s | %s |\n", printable(k.key).c_str(), printable(type).c_str(),
                !k.default_value   ? "required"
                : *k.default_value ? printable(std::string("`") + k.default_value + "`").c_str()
                                   : "(empty)",
                printable(owner).c_str(), printable(k.help).c_str());
  };
  std::printf("| key | type | default | from | meaning |\n|---|---|---|---|---|\n");
  for (const auto& k : core_config_keys()) row(k, "core");
  PluginRegistry registry(plugin_paths(vm));
  for (const auto& c : registry.scan()) {
    // Said, since the keys of a plugin of the same name further down the search path are listed instead.
    if (!c.usable && !c.shadowed)
      std::fprintf(stderr, "mgtrain: warning: plugin '%s' is refused: %s\n", printable(c.path).c_str(),
                   printable(c.refusal).c_str());
    if (!c.usable) continue;
    for (const auto& k : registry.config_keys(c.kind, c.name)) row(k, c.kind + " " + c.name);
  }
  return 0;
}

}  // namespace mgt::cli
