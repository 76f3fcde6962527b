// Round axis ticks shared by the app's charts and the figures drawn on the CPU. Plain C++.
#pragma once

#include <string>
#include <vector>

namespace difflens::viz {

// Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart; 2.5 or 4 times where those would
// leave a single tick inside and two were asked for), at most max_ticks of them, 0 among them when the range
// spans it. A range of zero width gets one tick.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// The printf format for the labels of `ticks` (evenly spaced): `fmt` ("%.2f") when each label reads as its
// tick within a quarter step, else "%.Nf" with as many decimals as the step has (0.005 -> "%.3f").
std::string tick_label_format(const std::vector<double>& ticks, const char* fmt);

}  // namespace difflens::viz
