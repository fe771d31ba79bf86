// The HTML report's page: its head (a Content-Security-Policy that forbids every network load,
// the inline style), its end (the footer, the script for hover details and sortable tables),
// and the summary cards both reports open with.
#pragma once

#include <string>

namespace laggard::html {

/// The page's start, up to and with <body>; `title` is escaped.
void page_begin(std::string& out, const std::string& title);
/// The footer, the script, and the end of the page.
void page_end(std::string& out);
/// One summary card: `key` is escaped, `value_html` and `detail_html` are HTML already.
void card(std::string& out, const std::string& key, const std::string& value_html,
          const std::string& detail_html);

}  // namespace laggard::html
