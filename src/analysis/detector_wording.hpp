// laggard — the detector's wording helpers (detector_wording.cc): numbers, rank lists and cohort
// names as findings and hints print them. Private to the library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace laggard::detector_detail {

std::string number(double value);  // %g
std::string fixed2(double value);  // %.2f
// The cohort's name, "default" for the default (empty) cohort.
std::string cohort_label(std::string_view cohort);
// " of cohort 'x'" — left out for the default cohort, which most jobs only have.
std::string cohort_suffix(std::string_view cohort);
// "0,1,2", "0-63,70": runs of four or more become ranges; a long list ends in "and N more".
void append_ranks(std::string& out, const std::vector<int>& sorted);
// "rank 3", "ranks 0-63,70".
std::string ranks_phrase(const std::vector<int>& sorted);

}  // namespace laggard::detector_detail
