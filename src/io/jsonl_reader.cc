// Reads per-rank sample logs (schema "laggard.sample/1"): one line → one StepSample.
//
// Lines are parsed with simdjson's On-Demand API straight out of the read buffer: the buffer keeps
// SIMDJSON_PADDING spare bytes past its end, so every line in it can be handed to simdjson as a
// padded_string_view without a copy.
#include <fcntl.h>
#include <unistd.h>

#include <simdjson.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "laggard/jsonl.hpp"

namespace laggard {
namespace {

namespace od = simdjson::ondemand;

constexpr std::size_t kMaxKeptErrors = 20;
constexpr std::size_t kMaxTokenInMessage = 40;

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool is_blank(std::string_view s) {
  for (char c : s)
    if (!is_json_space(c)) return false;
  return true;
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// The JSON text of a value, for an error message: short tokens verbatim, containers by type.
std::string describe(od::value& value) {
  std::string_view token = value.raw_json_token();
  while (!token.empty() && is_json_space(token.back())) token.remove_suffix(1);
  if (token.empty()) return "nothing";
  if (token.front() == '{') return "an object";
  if (token.front() == '[') return "an array";
  if (token.size() > kMaxTokenInMessage) return std::string(token.substr(0, kMaxTokenInMessage)) + "...";
  return std::string(token);
}

std::string format_number(double value) {
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, static_cast<std::size_t>(result.ptr - buf));
}

// "field 'ms' of stage 2 ('forward')" / "field 'rank'": the subject of every field message.
std::string field_subject(std::string_view field, long stage_index = -1,
                          std::string_view stage_name = {}) {
  std::string s = "field " + quoted(field);
  if (stage_index >= 0) {
    s += " of stage " + std::to_string(stage_index);
    if (!stage_name.empty()) s += " (" + quoted(stage_name) + ")";
  }
  return s;
}

// Reads an integer field in [0, max]; on failure writes the reason to `error` and returns false.
bool read_count(od::value& value, std::int64_t max, const std::string& subject, std::int64_t& out,
                std::string& error) {
  if (value.get_int64().get(out)) {
    error = subject + " is not an integer (" + describe(value) + ")";
    return false;
  }
  if (out < 0) {
    error = subject + " is negative (" + std::to_string(out) + ")";
    return false;
  }
  if (out > max) {
    error = subject + " is too large (" + std::to_string(out) + ", at most " + std::to_string(max) +
            ")";
    return false;
  }
  return true;
}

// Reads a finite, non-negative number. JSON has no NaN or infinity, but some writers (Python's
// json module) emit NaN/Infinity anyway: those, null and out-of-range numbers are all refused here.
bool read_duration(od::value& value, const std::string& subject, double& out, std::string& error) {
  if (value.get_double().get(out)) {
    error = subject + " is not a finite number (" + describe(value) + ")";
    return false;
  }
  if (!std::isfinite(out)) {
    error = subject + " is not a finite number (" + describe(value) + ")";
    return false;
  }
  if (out < 0) {
    error = subject + " is negative (" + format_number(out) + ")";
    return false;
  }
  return true;
}

bool read_string(od::value& value, const std::string& subject, std::string_view& out,
                 std::string& error) {
  if (value.get_string().get(out)) {
    error = subject + " is not a string (" + describe(value) + ")";
    return false;
  }
  return true;
}

// One stage object's fields as read, validated once the whole object is seen (the name, needed
// by every message about the stage, may come after the other fields).
struct StageFields {
  std::string_view name, kind;
  bool has_name = false, has_kind = false, has_ms = false, has_calls = false;
  double ms = 0.0;
  std::int64_t calls = 1;
};

}  // namespace

// The line parser behind SampleParser and SampleFileReader. Not thread-safe.
class SampleLineParser {
 public:
  /// Parses a line whose buffer has at least SIMDJSON_PADDING readable bytes past its end.
  bool parse(simdjson::padded_string_view json, StepSample& out, std::string& error);

  /// Parses any line: copies it into a padded scratch buffer first (reused between calls).
  bool parse_copy(std::string_view line, StepSample& out, std::string& error) {
    if (scratch_.size() < line.size() + simdjson::SIMDJSON_PADDING)
      scratch_.resize(line.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(scratch_.data(), line.data(), line.size());
    return parse(simdjson::padded_string_view(scratch_.data(), line.size(), scratch_.size()), out,
                 error);
  }

 private:
  bool parse_stages(od::value& value, StepSample& out, std::string& error);
  bool parse_stage(od::value& value, long index, StageTime& stage, std::string& error,
                   simdjson::error_code& json_error);

  od::parser parser_;
  std::string scratch_;
};

bool SampleLineParser::parse(simdjson::padded_string_view json, StepSample& out,
                             std::string& error) {
  std::size_t first = 0;
  while (first < json.size() && is_json_space(json[first])) ++first;
  if (first == json.size()) {
    error = "empty line";
    return false;
  }
  if (json[first] != '{') {
    error = std::string("not a JSON object (the line starts with '") + json[first] + "')";
    return false;
  }

  const auto invalid_json = [&error](simdjson::error_code code) {
    error = std::string("not valid JSON (") + simdjson::error_message(code) + ")";
    return false;
  };

  od::document doc;
  if (auto code = parser_.iterate(json).get(doc)) return invalid_json(code);
  od::object object;
  if (auto code = doc.get_object().get(object)) return invalid_json(code);

  // Precedence of what is reported: broken JSON, then the schema (a line from some other log
  // should say so, not complain about its fields), then the first bad field, then missing fields.
  // So after a bad field the loop goes on, only to find the schema and structural errors.
  std::string field_error;
  bool has_schema = false, has_rank = false, has_world = false, has_step = false,
       has_step_ms = false, has_stages = false;
  std::string schema_error;
  std::int64_t rank = 0, world_size = 0, step = 0;
  out.host.clear();
  out.cohort.clear();
  out.work = std::numeric_limits<double>::quiet_NaN();

  for (auto field_result : object) {
    od::field field;
    if (auto code = field_result.get(field)) return invalid_json(code);
    std::string_view key;
    if (auto code = field.unescaped_key().get(key)) return invalid_json(code);
    od::value value = field.value();

    if (key == "schema") {
      has_schema = true;
      std::string_view schema;
      if (value.get_string().get(schema)) {
        schema_error = "field 'schema' is not a string (" + describe(value) + "), expected \"" +
                       std::string(kSampleSchema) + "\"";
      } else if (schema != kSampleSchema) {
        schema_error = "field 'schema' is \"" + std::string(schema) + "\", expected \"" +
                       std::string(kSampleSchema) + "\"";
      }
      continue;
    }
    if (!field_error.empty()) continue;

    if (key == "rank") {
      has_rank = true;
      read_count(value, std::numeric_limits<int>::max(), "field 'rank'", rank, field_error);
    } else if (key == "world_size") {
      has_world = true;
      if (read_count(value, std::numeric_limits<int>::max(), "field 'world_size'", world_size,
                     field_error) &&
          world_size < 1)
        field_error = "field 'world_size' must be at least 1 (0)";
    } else if (key == "step") {
      has_step = true;
      read_count(value, std::numeric_limits<std::int64_t>::max(), "field 'step'", step,
                 field_error);
    } else if (key == "step_ms") {
      has_step_ms = true;
      read_duration(value, "field 'step_ms'", out.step_ms, field_error);
    } else if (key == "work") {
      if (!value.is_null()) read_duration(value, "field 'work'", out.work, field_error);
    } else if (key == "host" || key == "cohort") {
      std::string_view text;
      if (read_string(value, field_subject(key), text, field_error))
        (key == "host" ? out.host : out.cohort).assign(text.data(), text.size());
    } else if (key == "stages") {
      has_stages = true;
      if (!parse_stages(value, out, field_error) && field_error.empty())
        return false;  // broken JSON inside the array: `error` was set by parse_stages
    }
    // Any other field is ignored: newer writers may add fields.
  }
  if (!error.empty()) return false;  // set by parse_stages for broken JSON

  // The object has been read to its closing brace; anything but whitespace after it is an error.
  const char* end = nullptr;
  if (!doc.current_location().get(end)) return invalid_json(simdjson::TRAILING_CONTENT);

  if (!has_schema) {
    error = "missing field 'schema' (expected \"" + std::string(kSampleSchema) + "\")";
    return false;
  }
  if (!schema_error.empty()) {
    error = std::move(schema_error);
    return false;
  }
  if (!field_error.empty()) {
    error = std::move(field_error);
    return false;
  }
  const char* missing = !has_rank      ? "rank"
                        : !has_world   ? "world_size"
                        : !has_step    ? "step"
                        : !has_step_ms ? "step_ms"
                        : !has_stages  ? "stages"
                                       : nullptr;
  if (missing) {
    error = std::string("missing field '") + missing + "'";
    return false;
  }
  if (rank >= world_size) {
    error = "field 'rank' (" + std::to_string(rank) + ") is not below field 'world_size' (" +
            std::to_string(world_size) + ")";
    return false;
  }
  out.rank = static_cast<int>(rank);
  out.world_size = static_cast<int>(world_size);
  out.step = step;
  return true;
}

// Returns false with `error` set for broken JSON, or with `field_error` set for a bad stage.
bool SampleLineParser::parse_stages(od::value& value, StepSample& out, std::string& field_error) {
  od::array array;
  if (value.get_array().get(array)) {
    field_error = "field 'stages' is not an array (" + describe(value) + ")";
    return false;
  }
  // Reuse the caller's StageTime objects (and their name strings): in steady state, with the same
  // stages every step, parsing allocates nothing.
  std::size_t count = 0;
  for (auto element_result : array) {
    od::value element;
    simdjson::error_code json_error = element_result.get(element);
    if (!json_error) {
      if (count == out.stages.size()) out.stages.emplace_back();
      if (parse_stage(element, static_cast<long>(count), out.stages[count], field_error,
                      json_error)) {
        ++count;
        continue;
      }
    }
    if (json_error) {
      field_error.clear();
      json_error_ = json_error;
    }
    return false;
  }
  out.stages.resize(count);
  return true;
}

}  // namespace laggard
