#include "evaluate.hpp"

#include "checkpoint.hpp"
#include "datasets/sharded_reader.hpp"
#include "plugin_loader.hpp"
#include "trainer.hpp"

namespace mgt {

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               const std::vector<std::string>& plugin_paths, int64_t batch) {
  const CheckpointMeta stored = read_checkpoint_meta(checkpoint);
  Config config = Config::from_string(stored.config_ini, checkpoint + " (stored config)");
  PluginRegistry registry(plugin_paths);
  const PluginChoice choice = plugin_choice(config);
  config.validate(known_config_keys(registry, choice));

  auto model = registry.create_model(choice.model, config);
  ParameterStore store;
  model->declare(store);
  store.finalize();
  load_checkpoint(checkpoint, store, nullptr);

  data::ReaderOptions ro;
  ro.path = data_path;
  ro.x_name = config.get_string("data.x_name");
  ro.y_name = config.get_string("data.y_name");
  ro.global_batch = batch;
  ro.shuffle = false;
  ro.drop_last = false;
  data::ShardedReader reader(ro);
  reader.start(0, 0);

  Shape logits_shape = model->output_shape([&] {
    Shape s = {batch};
    for (int64_t d : reader.info().sample_shape) s.push_back(d);
    return s;
  }());
  Tensor grad(logits_shape);
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  StepContext ctx;
  ctx.training = false;
  for (int64_t b = 0; b < reader.batches_per_epoch(); ++b) {
    data::Batch next = reader.next();
    const Tensor& logits = model->forward(next.x, ctx);
    grad.resize(logits.shape());
    loss_sum += softmax_cross_entropy(logits, next.y, grad, 1.0f);
    correct += count_correct(logits, next.y);
    result.samples += next.rows;
  }
  result.loss = loss_sum / static_cast<double>(std::max<int64_t>(result.samples, 1));
  result.accuracy = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(result.samples, 1));
  return result;
}

}  // namespace mgt
