// The HTML report's page scaffolding (page.hpp): inline CSS and JS, head, footer, cards.
#include "sinks/html/page.hpp"

#include <string>

#include "laggard/html_report.hpp"
#include "laggard/version.hpp"

namespace laggard::html {
namespace {

const char* kCss = R"css(
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d9d9de;--bg:#ffffff;--card:#f6f7f9;--red:#b2182b;--blue:#2166ac;--green:#4d9221}
*{box-sizing:border-box}
body{margin:0;padding:24px 32px 48px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg);max-width:1200px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.sub{color:var(--muted);margin:0}
.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:190px}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:19px;font-weight:600;margin-top:2px}
.card .d{color:var(--muted);font-size:12px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600;white-space:nowrap}
table.sortable th{cursor:pointer}
table.sortable th:hover{color:var(--fg)}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.origin td{background:#fff1c2;font-weight:600}
tr.victim td{background:#fdf6f6}
.badge{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.v-regressed{background:var(--red)}.v-improved{background:var(--blue)}.v-same{background:var(--green)}.v-unknown{background:#888}
.role{display:inline-block;padding:1px 6px;border-radius:4px;font-size:11px;font-weight:700;border:1px solid currentColor;margin-left:6px}
.role.origin{color:#8a5a00}.role.victim{color:var(--red)}.role.unknown{color:#666}
.note{color:var(--muted);margin:6px 0}
.callout{border-left:4px solid #e0a800;background:#fffaf0;padding:8px 12px;margin:10px 0}
.callout.ok{border-color:var(--green);background:#f5fbf2}
.chart{overflow-x:auto}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
svg .cell:hover{stroke:#000;stroke-width:1.5}
#cell-info{min-height:1.4em;color:var(--muted);font-size:13px}
#js-errors{color:#fff;background:var(--red);padding:8px;white-space:pre-wrap}
#js-errors:empty{display:none}
td.why,th.why{font-size:12px;color:var(--muted);min-width:240px}
tr.origin td.why{color:var(--fg)}
footer{margin-top:36px;color:var(--muted);font-size:12px}
ul.errors{margin:4px 0;padding-left:20px;font-size:12px}
.legend{display:flex;gap:16px;align-items:center;color:var(--muted);font-size:12px;margin:4px 0}
.swatch{display:inline-block;width:26px;height:10px;vertical-align:middle;border:1px solid var(--line);margin-right:4px}
)css";

// Registered first, so that an error anywhere in the page is written into the page itself (the
// browser test reads it from the DOM).
const char* kErrorCapture = R"js(
window.addEventListener('error', function (e) {
  document.documentElement.setAttribute('data-error', '1');
  var box = document.getElementById('js-errors');
  var msg = (e && e.message) ? e.message : 'unknown error';
  if (box) box.textContent += 'JavaScript error: ' + msg + '\n';
});
)js";

// Hover details for heatmap cells, sortable tables, then the ready mark.
const char* kMainJs = R"js(
(function () {
  var info = document.getElementById('cell-info');
  var tips = document.querySelectorAll('[data-tip]');
  for (var i = 0; i < tips.length; i++) {
    tips[i].addEventListener('mouseenter', function (e) {
      if (info) info.textContent = e.currentTarget.getAttribute('data-tip');
    });
  }
  var tables = document.querySelectorAll('table.sortable');
  for (var t = 0; t < tables.length; t++) {
    (function (table) {
      if (!table.tHead || !table.tBodies.length) return;
      var heads = table.tHead.rows[0].cells;
      for (var c = 0; c < heads.length; c++) {
        (function (col, th) {
          th.title = 'sort';
          th.addEventListener('click', function () {
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            var asc = th.getAttribute('data-dir') !== 'asc';
            rows.sort(function (a, b) {
              var x = a.cells[col].getAttribute('data-v') || a.cells[col].textContent;
              var y = b.cells[col].getAttribute('data-v') || b.cells[col].textContent;
              var nx = parseFloat(x), ny = parseFloat(y);
              var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
              return asc ? r : -r;
            });
            th.setAttribute('data-dir', asc ? 'asc' : 'desc');
            rows.forEach(function (r) { body.appendChild(r); });
          });
        })(c, heads[c]);
      }
    })(tables[t]);
  }
  document.body.setAttribute('data-ready', '1');
})();
)js";

}  // namespace

void page_begin(std::string& out, const std::string& title) {
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No network: nothing but the page's own inline style, script and data: images.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(title) + "</title>\n<style>" + kCss + "</style>\n";
  out += "<script>" + std::string(kErrorCapture) + "</script>\n</head>\n<body>\n";
  out += "<div id=\"js-errors\"></div>\n";
}

void page_end(std::string& out) {
  out += "<footer>Generated by laggard ";
  out += kVersion;
  out += ". One self-contained file: no network access is needed to view it.</footer>\n";
  out += "<script>" + std::string(kMainJs) + "</script>\n</body>\n</html>\n";
}

void card(std::string& out, const std::string& key, const std::string& value_html,
          const std::string& detail_html) {
  out += "<div class=\"card\"><div class=\"k\">" + html_escape(key) + "</div><div class=\"v\">" +
         value_html + "</div>";
  if (!detail_html.empty()) out += "<div class=\"d\">" + detail_html + "</div>";
  out += "</div>\n";
}

}  // namespace laggard::html
