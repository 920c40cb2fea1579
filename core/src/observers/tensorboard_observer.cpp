// TensorBoard's view of a run: each interval's figures as scalars in an event file
// (tensorboard.cpp writes the file).
#include "observers/observer.hpp"
#include "observers/tensorboard.hpp"

namespace mgt {

namespace {

// Loss, accuracy, learning rate, samples/s and each rank's step time, flushed every interval so
// TensorBoard shows a run as it goes.
class TensorBoardObserver final : public TrainingObserver {
 public:
  explicit TensorBoardObserver(const std::string& dir) : writer_(dir) {}

  void on_interval(const IntervalFigures& f) override {
    writer_.add_scalar("train/loss", f.step, f.loss);
    writer_.add_scalar("train/accuracy", f.step, f.accuracy);
    writer_.add_scalar("train/learning_rate", f.step, f.learning_rate);
    writer_.add_scalar("train/samples_per_s", f.step, f.samples_per_s);
    for (size_t r = 0; r < f.rank_step_ms.size(); ++r)
      writer_.add_scalar("step_time_ms/rank" + std::to_string(r), f.step, f.rank_step_ms[r]);
    writer_.flush();
  }

 private:
  TensorBoardWriter writer_;
};

}  // namespace

std::unique_ptr<TrainingObserver> make_tensorboard_observer(const std::string& dir) {
  return std::make_unique<TensorBoardObserver>(dir);
}

}  // namespace mgt
