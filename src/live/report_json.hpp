// One line of reports.jsonl. Private.
#pragma once

#include <cstdint>
#include <string>

#include "laggard/detector.hpp"

namespace laggard {

/// Appends {"step":N,<metrics in name order>,"stragglers":[...],"waiting":[...]} and '\n' to
/// `out` (the layout the Python JsonlReportSink writes). Non-finite numbers become null.
void append_report_json(std::int64_t step, const Metrics& metrics, const Report& report,
                        std::string& out);

}  // namespace laggard
