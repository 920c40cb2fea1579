// TensorBoard's view of a run: each interval's figures as scalars in an event file
// (tensorboard.cpp writes the file).
#include <iostream>

#include "io/console.hpp"
#include "mgtrain/error.hpp"
#include "observers/observer.hpp"
#include "observers/tensorboard.hpp"

namespace mgt {

namespace {

// Loss, accuracy, learning rate, gradient norm, samples/s and each rank's step time, and the test
// file's accuracy and loss after an evaluated epoch, flushed every interval so
// TensorBoard shows a run as it goes. An interval that cannot be written (a full disk) is left out
// whole, the run is told once on stderr, and the event file gets nothing more: the run goes on.
class TensorBoardObserver final : public TrainingCallback {
 public:
  // A disk already full at the start is a full disk like any other: warned of, and the run goes on.
  explicit TensorBoardObserver(const std::string& dir) : writer_(dir) { flush(); }

  void on_interval(const IntervalFigures& f) override {
    if (off_) return;
    writer_.add_scalar("train/loss", f.step, f.loss);
    writer_.add_scalar("train/accuracy", f.step, f.accuracy);
    writer_.add_scalar("train/learning_rate", f.step, f.learning_rate);
    writer_.add_scalar("train/grad_norm", f.step, f.grad_norm);
    writer_.add_scalar("train/samples_per_s", f.step, f.samples_per_s);
    if (f.tokens_per_s > 0) writer_.add_scalar("train/tokens_per_s", f.step, f.tokens_per_s);
    for (size_t r = 0; r < f.rank_step_ms.size(); ++r)
      writer_.add_scalar("step_time_ms/rank" + std::to_string(r), f.step, f.rank_step_ms[r]);
    flush();
  }

  void on_evaluation(const EvalFigures& f) override {
    if (off_) return;
    writer_.add_scalar("test/accuracy", f.step, f.accuracy);
    writer_.add_scalar("test/loss", f.step, f.loss);
    flush();
  }

 private:
  void flush() {
    try {
      writer_.flush();
    } catch (const IoError& e) {
      off_ = true;
      writer_.remove_if_empty();
      console::warning(std::string("mgtrain: warning: ") + e.what() +
                       "; TensorBoard output is off for the rest of the run\n");
    }
  }

  TensorBoardWriter writer_;
  bool off_ = false;
};

}  // namespace

std::unique_ptr<TrainingCallback> make_tensorboard_observer(const std::string& dir) {
  return std::make_unique<TensorBoardObserver>(dir);
}

}  // namespace mgt
