#include "runtime/init_from.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <vector>

#include "base/sha256.hpp"
#include "runtime/agreement.hpp"
#include "runtime/run.hpp"

namespace mgt {

namespace {

constexpr size_t kShownNames = 8;  // names listed per kind before "and N more"

// The SHA-256 of the file's bytes: the source's identity, recorded in the new run's checkpoints.
std::string file_sha256(const std::string& path, const std::string& prefix) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(prefix + "cannot read the file to hash it");
  Sha256 hash;
  std::vector<char> chunk(size_t{1} << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (in.gcount() > 0) hash.update(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError(prefix + "read error while hashing the file");
  return hash.hex_digest();
}

// "a, b, c and 4 more".
std::string some_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShownNames; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShownNames) out += " and " + std::to_string(names.size() - kShownNames) + " more";
  return out;
}

// What matched, by name and shape, between the checkpoint's tensors and the model's.
struct Matching {
  // fresh: the model's that start from the seed (not in the checkpoint, or of another shape there)
  std::vector<std::string> loaded, fresh;
  std::vector<std::string> mismatched;  // "name: the checkpoint's [..], this model's [..]"
  std::vector<std::string> unused;      // the checkpoint's, not in the model
};

// Copies each stored tensor whose name and shape match one of `wanted` (name, shape, destination).
struct Wanted {
  const std::string& name;
  const Shape& shape;
  float* data;
};
Matching copy_matching(const std::vector<StoredTensor>& stored, const std::vector<Wanted>& wanted) {
  std::map<std::string, const StoredTensor*> by_name;
  for (const auto& t : stored) by_name[t.name] = &t;
  Matching m;
  for (const Wanted& w : wanted) {
    const auto it = by_name.find(w.name);
    if (it == by_name.end()) {
      m.fresh.push_back(w.name);
      continue;
    }
    const StoredTensor& t = *it->second;
    if (t.shape == w.shape) {
      std::copy(t.values.begin(), t.values.end(), w.data);
      m.loaded.push_back(w.name);
    } else {
      m.fresh.push_back(w.name);
      m.mismatched.push_back(w.name + ": the checkpoint's " + shape_string(t.shape) + ", this model's " +
                             shape_string(w.shape));
    }
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name) m.unused.push_back(name);
  return m;
}

// Rank 0: reads the checkpoint, loads what matches into the store, writes the report to the log.
void load_matching(Run& run, const std::string& spec) {
  const std::string prefix = "model.init_from '" + spec + "': ";
  std::string path;
  CheckpointContents source;
  try {
    path = resolve_checkpoint(spec);
    source = read_checkpoint_model(path);
  } catch (const Error& e) {
    throw IoError("model.init_from: " + std::string(e.what()));
  }
  // checkpoint.overwrite would remove the source once this run writes its first checkpoint.
  std::error_code ec;
  for (const std::string& replaced : run.replaced_checkpoints)
    if (std::filesystem::equivalent(replaced, path, ec))
      throw ConfigError(prefix + "'" + path + "' is one of the checkpoints of checkpoint.dir '" + run.checkpoint_dir +
                        "' that checkpoint.overwrite = true removes once this run writes its first: give another "
                        "checkpoint.dir, or copy the checkpoint elsewhere");
  const std::string sha256 = file_sha256(path, prefix);

  // Everything is matched into copies first: a refused checkpoint leaves the seed's values.
  std::vector<float> params(run.store.params_data(), run.store.params_data() + run.store.flat_size());
  std::vector<float> buffers(run.store.buffers_data(), run.store.buffers_data() + run.store.buffers_size());
  std::vector<Wanted> wanted_params, wanted_buffers;
  for (const auto& p : run.store.params()) wanted_params.push_back({p.name, p.shape, params.data() + p.offset});
  for (const auto& b : run.store.buffers()) wanted_buffers.push_back({b.name, b.shape, buffers.data() + b.offset});
  const Matching p = copy_matching(source.params, wanted_params);
  const Matching b = copy_matching(source.buffers, wanted_buffers);

  if (p.loaded.empty()) {
    std::vector<std::string> model_names;
    for (const auto& info : run.store.params()) model_names.push_back(info.name + " " + shape_string(info.shape));
    std::vector<std::string> stored_names;
    for (const auto& t : source.params) stored_names.push_back(t.name + " " + shape_string(t.shape));
    throw ConfigError(prefix + "no parameter matches this model by name and shape (the checkpoint's " +
                      std::to_string(source.params.size()) + ": " + some_names(stored_names) + "; this model's " +
                      std::to_string(model_names.size()) + ": " + some_names(model_names) +
                      "): refused rather than training from the seed; name a checkpoint of a related model");
  }
  std::copy(params.begin(), params.end(), run.store.params_data());
  std::copy(buffers.begin(), buffers.end(), run.store.buffers_data());
  run.meta.init_from = std::filesystem::absolute(path).lexically_normal().string();
  run.meta.init_from_sha256 = sha256;

  std::ostream& log = run.log;
  log << prefix << "step " << source.meta.step << " of its run, sha256 " << sha256 << ": " << p.loaded.size()
      << " of this model's " << run.store.params().size() << " parameter(s) loaded, " << p.fresh.size()
      << " new (from train.seed), " << p.mismatched.size() + p.unused.size() << " of the checkpoint's left out";
  if (!run.store.buffers().empty() || !source.buffers.empty())
    log << "; buffers: " << b.loaded.size() << " loaded, " << b.fresh.size() << " new, "
        << b.mismatched.size() + b.unused.size() << " left out";
  log << "; optimizer state, step, data position and schedule start fresh\n";
  log << prefix << "loaded " << some_names(p.loaded) << "\n";
  if (!p.fresh.empty()) log << prefix << "new " << some_names(p.fresh) << "\n";
  // A shape mismatch is what a user most needs to see: each one, up to a screenful.
  for (size_t i = 0; i < p.mismatched.size() && i < kShownNames; ++i)
    log << prefix << "left out " << p.mismatched[i] << "\n";
  if (p.mismatched.size() > kShownNames)
    log << prefix << "left out " << p.mismatched.size() - kShownNames << " more of another shape\n";
  if (!p.unused.empty()) log << prefix << "left out, not in this model: " << some_names(p.unused) << "\n";
  for (size_t i = 0; i < b.mismatched.size() && i < kShownNames; ++i)
    log << prefix << "left out buffer " << b.mismatched[i] << "\n";
  if (!b.fresh.empty()) log << prefix << "new buffer(s) " << some_names(b.fresh) << "\n";
  if (!b.unused.empty()) log << prefix << "left out buffer(s), not in this model: " << some_names(b.unused) << "\n";
  log << std::flush;
}

}  // namespace

void initialize_from_checkpoint(Run& run) {
  const std::string spec = run.config.get_string("model.init_from");
  if (spec.empty()) return;
  if (!run.options.resume.empty()) {
    if (run.leader)
      run.log << "model.init_from '" << spec << "' not applied: --resume continues this run from its own "
              << "parameters (its checkpoints keep where they first came from)\n"
              << std::flush;
    return;
  }
  agree(run.comm, [&] {
    if (run.leader) load_matching(run, spec);
  });
  // One read and one broadcast, as a resume does: every rank gets rank 0's bits, and the file is
  // read once however many ranks start from it. Parameters the node's ranks share are rank 0's.
  if (!run.store.params_placed()) run.comm.broadcast(run.store.params_data(), run.store.flat_size() * sizeof(float), 0);
  if (run.store.buffers_size() > 0)
    run.comm.broadcast(run.store.buffers_data(), run.store.buffers_size() * sizeof(float), 0);
}

}  // namespace mgt
