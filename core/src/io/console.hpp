#pragma once
// Rank 0's terminal while a live progress bar is drawn on it (train.progress). The bar stays on the
// line the cursor is on, so any other line printed meanwhile (a log line, a warning, the error that
// ends the run) would land in the middle of it. Such lines go through here: the bar's line is
// cleared first, and the bar drawn again below them. Without a bar they are written as they are.
#include <iosfwd>
#include <string>
#include <string_view>

namespace mgt::console {

// Draws `text` as the bar on `out`, over the one drawn before, and leaves the cursor on its line.
void draw_status(std::ostream& out, const std::string& text);

// Ends the bar's line: it stays as last drawn, and what is printed next starts below it.
void end_status();

// `text`, a piece of rank 0's log on `out`: where the bar is drawn on `out`, its line is cleared
// before the text, and the bar drawn again once the text has ended its line.
void print(std::ostream& out, std::string_view text);

// One line (ending in '\n') meant for stderr while the run goes on: around the bar as print() does.
// Where stderr shows where the bar is drawn (one terminal), the line goes to the bar's stream,
// since a launcher forwards a rank's stdout and stderr separately and would not keep their order.
void warning(const std::string& line);

// As warning(), for a line after which the run ends: the bar's line is ended, not drawn again.
void final_line(const std::string& line);

}  // namespace mgt::console
