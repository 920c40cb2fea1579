#pragma once
// How the ranks agree before step 1: a check runs on every rank and, if it failed anywhere, every
// rank ends cleanly with the same error, printed once by the lowest rank that found it.
#include <functional>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

// An error found before step 1 and agreed on by all ranks: every rank ends cleanly with it, and
// only the lowest rank that saw it prints it (`report` is true there).
class StartupError : public Error {
 public:
  StartupError(const std::string& message, bool report) : Error(message), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

// Runs `check` on every rank, then agrees: if it threw on any rank, every rank throws
// StartupError, flagged for printing on the lowest failing rank only.
void agree(Communicator& comm, const std::function<void()>& check);

// agree() for work that only some ranks do while the others wait without using the cores (the
// reference runs of `mgtrain bench` and `mgtrain verify`): `part` runs on every rank (a no-op where
// there is nothing to do), the ranks meet in a sleeping barrier with the communicator's deadline,
// naming `waiting_for` if it passes, then all throw StartupError if `part` threw anywhere. The
// message of a rank whose error was to be reported wins over a rank's "rank R failed" echo.
void agree_after_sleeping(Communicator& comm, const std::string& waiting_for, const std::function<void()>& part);

// What every rank must share before step 1, in the order compared: a description and its text,
// as entries joined by `separator` so a difference can be shown entry by entry.
struct AgreementItem {
  const char* what;
  std::string text;
  char separator;
};

// Compares fingerprints of the items across ranks; on a mismatch the first differing rank sends
// its text to rank 0, which names the first differing entry. Every rank then throws StartupError.
void check_agreement(Communicator& comm, const std::vector<AgreementItem>& items);

}  // namespace mgt
