// Reads per-rank sample logs (schema "laggard.sample/1"): one line → one StepSample.
//
// Lines are parsed with simdjson's On-Demand API straight out of the read buffer: the buffer keeps
// SIMDJSON_PADDING spare bytes past its end, so every line in it can be handed to simdjson as a
// padded_string_view without a copy.
#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "laggard/detail/sample_parser.hpp"
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

// The raw JSON text of `value`, cut to the document `doc`: where the document is broken, simdjson
// can hand out a value past its last token, whose raw_json_token() length is meaningless.
std::string_view raw_token(std::string_view doc, od::value& value) {
  std::string_view token = value.raw_json_token();
  const char* const end = doc.data() + doc.size();
  if (token.data() < doc.data() || token.data() >= end) return {};
  token = token.substr(0, static_cast<std::size_t>(end - token.data()));
  while (!token.empty() && is_json_space(token.back())) token.remove_suffix(1);
  return token;
}

std::string describe_token(std::string_view token) {
  if (token.empty()) return "nothing";
  if (token.front() == '{') return "an object";
  if (token.front() == '[') return "an array";
  if (token.size() > kMaxTokenInMessage)
    return std::string(token.substr(0, kMaxTokenInMessage)) + "...";
  return std::string(token);
}

// The JSON text of a value, for an error message.
std::string describe(std::string_view doc, od::value& value) {
  return describe_token(raw_token(doc, value));
}

// A JSON number as the nearest double. simdjson checks the number's grammar and range, and
// std::from_chars, correctly rounded, gives its value: the simdjson of Debian 12 (3.0.1) misreads a
// fraction of more than 19 significant digits whose integer part is 0 ("0.95000000000000000000"
// reads 0.0277; simdjson issue 2093, fixed in 3.6.3), and the sample line fuzzer found that.
simdjson::error_code read_double(std::string_view doc, od::value& value, double& out) {
  const std::string_view token = raw_token(doc, value);  // before the value is read
  if (auto code = value.get_double().get(out)) return code;
  double exact;
  const auto result = std::from_chars(token.data(), token.data() + token.size(), exact);
  if (result.ec == std::errc() && result.ptr == token.data() + token.size()) out = exact;
  return simdjson::SUCCESS;
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
bool read_count(std::string_view doc, od::value& value, std::int64_t max, std::string_view subject,
                std::int64_t& out, std::string& error) {
  if (value.get_int64().get(out)) {
    error = std::string(subject) + " is not an integer (" + describe(doc, value) + ")";
    return false;
  }
  if (out < 0) {
    error = std::string(subject) + " is negative (" + std::to_string(out) + ")";
    return false;
  }
  if (out > max) {
    error = std::string(subject) + " is too large (" + std::to_string(out) + ", at most " +
            std::to_string(max) + ")";
    return false;
  }
  return true;
}

// Reads a finite, non-negative number. JSON has no NaN or infinity, but some writers (Python's
// json module) emit NaN/Infinity anyway: those, null and out-of-range numbers are all refused here.
bool read_duration(std::string_view doc, od::value& value, std::string_view subject, double& out,
                   std::string& error) {
  if (read_double(doc, value, out)) {
    error = std::string(subject) + " is not a finite number (" + describe(doc, value) + ")";
    return false;
  }
  if (!std::isfinite(out)) {
    error = std::string(subject) + " is not a finite number (" + describe(doc, value) + ")";
    return false;
  }
  if (out < 0) {
    error = std::string(subject) + " is negative (" + format_number(out) + ")";
    return false;
  }
  return true;
}

bool read_string(std::string_view doc, od::value& value, std::string_view subject,
                 std::string_view& out, std::string& error) {
  if (value.get_string().get(out)) {
    error = std::string(subject) + " is not a string (" + describe(doc, value) + ")";
    return false;
  }
  return true;
}

// The fields laggard reads; everything else is `unknown` (and ignored).
enum class Field : std::uint8_t {
  unknown,
  schema,
  rank,
  world_size,
  step,
  host,
  cohort,
  step_ms,
  work,
  stages,
  values,
  resources,  // sample
  name,
  kind,
  ms,
  calls  // stage
};

// `key` (whose size the caller has checked) is `name`: a memcmp of constant size, which the
// compiler inlines, where string_view's == would call memcmp.
template <std::size_t N>
bool is(std::string_view key, const char (&name)[N]) {
  return std::memcmp(key.data(), name, N - 1) == 0;
}

Field sample_field(std::string_view key) {
  switch (key.size()) {
    case 4:
      return is(key, "rank")   ? Field::rank
             : is(key, "step") ? Field::step
             : is(key, "host") ? Field::host
             : is(key, "work") ? Field::work
                               : Field::unknown;
    case 6:
      return is(key, "schema")   ? Field::schema
             : is(key, "cohort") ? Field::cohort
             : is(key, "stages") ? Field::stages
             : is(key, "values") ? Field::values
                                 : Field::unknown;
    case 7:
      return is(key, "step_ms") ? Field::step_ms : Field::unknown;
    case 9:
      return is(key, "resources") ? Field::resources : Field::unknown;
    case 10:
      return is(key, "world_size") ? Field::world_size : Field::unknown;
    default:
      return Field::unknown;
  }
}

Field stage_field(std::string_view key) {
  switch (key.size()) {
    case 2:
      return is(key, "ms") ? Field::ms : Field::unknown;
    case 4:
      return is(key, "name") ? Field::name : is(key, "kind") ? Field::kind : Field::unknown;
    case 5:
      return is(key, "calls") ? Field::calls : Field::unknown;
    default:
      return Field::unknown;
  }
}

// Which field `field` is. The key is compared as written, found between its opening quote and the
// closing quote before `:` (On-Demand has checked that shape): this skips simdjson's unescaping
// copy of every key, about a tenth of the parse time. Only a key that matches nothing and holds
// an escape (legal JSON, e.g. "r\u0061nk") is unescaped and compared again.
simdjson::error_code classify(od::field& field, Field (*fields)(std::string_view), Field& out) {
  const char* const begin = field.key().raw();
  const char* end = field.value().raw_json_token().data();  // the value, after `"key" :`
  while (*--end != ':') {
  }
  while (*--end != '"') {
  }
  std::string_view key(begin, static_cast<std::size_t>(end - begin));
  out = fields(key);
  if (LAGGARD_LIKELY(out != Field::unknown) || key.find('\\') == std::string_view::npos)
    return simdjson::SUCCESS;
  if (auto code = field.unescaped_key().get(key)) return code;
  out = fields(key);
  return simdjson::SUCCESS;
}

// How deeply an ignored value may nest arrays and objects: under simdjson's own limit (1024 levels,
// counting the sample's object and the field), whose iterator asserts it in debug builds. The
// check below recurses once per level: without this bound, a line of 100,000 '[' overflowed the
// stack.
constexpr int kMaxIgnoredDepth = 1000;

// Reads through a value the sample does not use, so that a line with broken JSON anywhere is
// refused: On-Demand checks only what is read, and would otherwise skip the damage unseen.
// Unknown fields are rare (laggard's own files have none), so this costs nothing in practice.
// `depth` is the nesting level of `value` inside the ignored field; deeper than kMaxIgnoredDepth
// is refused with DEPTH_ERROR.
simdjson::error_code check_json(od::value& value, int depth = 1) {
  if (depth > kMaxIgnoredDepth) return simdjson::DEPTH_ERROR;
  od::json_type type;
  if (auto code = value.type().get(type)) return code;
  switch (type) {
    case od::json_type::object: {
      od::object object;
      if (auto code = value.get_object().get(object)) return code;
      for (auto field_result : object) {
        od::field field;
        std::string_view key;
        if (auto code = std::move(field_result).get(field)) return code;
        if (auto code = field.unescaped_key().get(key)) return code;
        if (auto code = check_json(field.value(), depth + 1)) return code;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array array;
      if (auto code = value.get_array().get(array)) return code;
      for (auto element_result : array) {
        od::value element;
        if (auto code = std::move(element_result).get(element)) return code;
        if (auto code = check_json(element, depth + 1)) return code;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::number: {
      od::number number;
      return value.get_number().get(number);
    }
    case od::json_type::string: {
      std::string_view text;
      return value.get_string().get(text);
    }
    case od::json_type::boolean: {
      bool flag;
      return value.get_bool().get(flag);
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto code = value.is_null().get(is_null)) return code;
      return is_null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::TAPE_ERROR;
}

std::string line_too_long(std::uint64_t length) {
  return "line too long (" + std::to_string(length) + " bytes; the limit is " +
         std::to_string(kMaxLineBytes) + ")";
}

// What a stage object held, checked once the whole object has been read: the stage's name, which
// every message about the stage quotes, may come after the fields that are wrong.
struct StageFields {
  enum class State : std::uint8_t { missing, ok, not_string, not_number, negative, too_large };
  State name = State::missing, kind = State::missing, ms = State::missing, calls = State::missing;
  std::string_view name_text, kind_text;
  std::string_view name_token, kind_token, ms_token, calls_token;  // raw JSON, for messages
  double ms_value = 0.0;
  std::int64_t calls_value = 1;

  // For the next stage. The texts and tokens are left as they are: each is written whenever
  // its state says it is valid, and read only then. (Zeroing all of it for every stage was a
  // visible share of parsing.)
  void reset() {
    name = kind = ms = calls = State::missing;
    ms_value = 0.0;
    calls_value = 1;
  }
};

// The line parser behind SampleParser and SampleFileReader. Not thread-safe.
class SampleLineParser {
 public:
  /// Parses a line whose buffer has at least SIMDJSON_PADDING readable bytes past its end: a
  /// plain line (as laggard writes them) on the fast path, any other with simdjson.
  bool parse(simdjson::padded_string_view json, StepSample& out, std::string& error) {
    if (LAGGARD_LIKELY(detail::parse_sample_fast(json, out))) return true;
    const bool ok = parse_general(json, out, error);
    release_long_line();
    return ok;
  }

  /// Parses any line (`fast`: trying the fast path first). The general parser needs padding:
  /// the line is copied into a padded scratch buffer for it (reused between calls).
  bool parse_copy(std::string_view line, StepSample& out, std::string& error, bool fast = true) {
    if (line.size() > kMaxLineBytes) {
      error = line_too_long(line.size());
      return false;
    }
    if (fast && detail::parse_sample_fast(line, out)) return true;
    if (scratch_.size() < line.size() + simdjson::SIMDJSON_PADDING)
      scratch_.resize(line.size() + simdjson::SIMDJSON_PADDING);
    if (!line.empty()) std::memcpy(scratch_.data(), line.data(), line.size());
    const bool ok = parse_general(
        simdjson::padded_string_view(scratch_.data(), line.size(), scratch_.size()), out, error);
    if (LAGGARD_UNLIKELY(scratch_.size() > kKeptParserCapacity)) std::string().swap(scratch_);
    release_long_line();
    return ok;
  }

 private:
  static constexpr std::size_t kKeptParserCapacity = 1 << 20;
  static constexpr std::size_t kShrunkParserCapacity = 4096;

  // simdjson keeps an index of the longest line it has parsed (about 7 bytes per byte); a run's
  // readers are open side by side, so after a line of over a megabyte it is let go.
  void release_long_line() {
    if (LAGGARD_UNLIKELY(parser_.capacity() > kKeptParserCapacity)) {
      const auto code = parser_.allocate(kShrunkParserCapacity);
      (void)code;  // out of memory: the next parse allocates again, or says so
    }
  }

  bool parse_general(simdjson::padded_string_view json, StepSample& out, std::string& error);
  // Both return false for a problem: broken JSON sets json_error_, a bad value sets field_error_.
  bool parse_stages(od::value& value, StepSample& out);
  bool parse_stage(od::value& value, std::size_t index, StageTime& stage);
  bool parse_named(od::value& value, const char* field, std::vector<NamedValue>& out);

  od::parser parser_;
  StageFields stage_fields_;  // reused for every stage
  std::string scratch_;
  std::string_view json_;  // the line being parsed
  simdjson::error_code json_error_ = simdjson::SUCCESS;
  std::string field_error_;
};

bool SampleLineParser::parse_general(simdjson::padded_string_view json, StepSample& out,
                                     std::string& error) {
  std::size_t first = 0;
  while (first < json.size() && is_json_space(json[first])) ++first;
  if (first == json.size()) {
    error = "empty line";
    return false;
  }
  if (json[first] != '{') {
    const unsigned char c = static_cast<unsigned char>(json[first]);
    if (c >= 0x20 && c < 0x7F) {
      error = std::string("not a JSON object (the line starts with '") + json[first] + "')";
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      error = std::string("not a JSON object (the line starts with byte 0x") + kHex[c >> 4] +
              kHex[c & 0xF] + ")";
    }
    return false;
  }
  const auto invalid_json = [&error](simdjson::error_code code) {
    if (code == simdjson::DEPTH_ERROR)
      error = "arrays or objects nested more than " + std::to_string(kMaxIgnoredDepth) +
              " levels deep";
    else
      error = std::string("not valid JSON (") + simdjson::error_message(code) + ")";
    return false;
  };

  json_ = json;
  od::document doc;
  if (auto code = parser_.iterate(json).get(doc)) return invalid_json(code);
  od::object object;
  if (auto code = doc.get_object().get(object)) return invalid_json(code);

  // What is reported, in order: broken JSON; then the schema (a line from some other log should
  // say so rather than complain about its fields); then the first bad field; then missing fields.
  // After a bad field the loop therefore goes on, but only looks for the schema.
  json_error_ = simdjson::SUCCESS;
  field_error_.clear();
  std::string schema_error;
  bool has_schema = false, has_rank = false, has_world = false, has_step = false,
       has_step_ms = false, has_stages = false;
  std::int64_t rank = 0, world_size = 0, step = 0;
  bool has_host = false, has_cohort = false;
  out.work = std::numeric_limits<double>::quiet_NaN();
  bool has_values = false, has_resources = false;

  for (auto field_result : object) {
    // The field in place, not copied out of the result: copying it (a std::pair of iterators
    // just built field by field) stalled on store forwarding at every field.
    if (auto code = field_result.error()) return invalid_json(code);
    od::field& field = field_result.value_unsafe();
    Field key;
    if (auto code = classify(field, sample_field, key)) return invalid_json(code);
    od::value& value = field.value();  // a reference: copying it stalls on store forwarding

    if (key == Field::schema) {
      has_schema = true;
      std::string_view schema;
      if (value.get_string().get(schema)) {
        schema_error = "field 'schema' is not a string (" + describe(json_, value) +
                       "), expected \"" + std::string(kSampleSchema) + "\"";
      } else if (schema != kSampleSchema) {
        schema_error = "field 'schema' is \"" + std::string(schema) + "\", expected \"" +
                       std::string(kSampleSchema) + "\"";
      }
      continue;
    }
    if (!field_error_.empty()) continue;

    switch (key) {
      case Field::rank:
        has_rank = true;
        read_count(json_, value, std::numeric_limits<int>::max(), "field 'rank'", rank,
                   field_error_);
        break;
      case Field::world_size:
        has_world = true;
        if (read_count(json_, value, std::numeric_limits<int>::max(), "field 'world_size'",
                       world_size, field_error_) &&
            world_size < 1)
          field_error_ =
              "field 'world_size' must be at least 1 (" + std::to_string(world_size) + ")";
        break;
      case Field::step:
        has_step = true;
        read_count(json_, value, std::numeric_limits<std::int64_t>::max(), "field 'step'", step,
                   field_error_);
        break;
      case Field::step_ms:
        has_step_ms = true;
        read_duration(json_, value, "field 'step_ms'", out.step_ms, field_error_);
        break;
      case Field::work: {
        // null is how some writers spell "not recorded". (get(), not the bool conversion, which
        // would throw for a malformed atom such as `nul`.)
        bool is_null = false;
        if (value.is_null().get(is_null) || !is_null)
          read_duration(json_, value, "field 'work'", out.work, field_error_);
        break;
      }
      case Field::host:
      case Field::cohort: {
        const bool host = key == Field::host;
        (host ? has_host : has_cohort) = true;
        std::string& target = host ? out.host : out.cohort;
        std::string_view text;
        // The same host and cohort come on every line: comparing is cheaper than assigning.
        if (read_string(json_, value, host ? "field 'host'" : "field 'cohort'", text,
                        field_error_) &&
            target != text)
          target.assign(text.data(), text.size());
        break;
      }
      case Field::stages:
        has_stages = true;
        if (!parse_stages(value, out) && json_error_) return invalid_json(json_error_);
        break;
      case Field::values:
      case Field::resources: {
        const bool values = key == Field::values;
        if (values ? has_values : has_resources) {
          field_error_ = std::string("field '") + (values ? "values" : "resources") +
                         "' appears twice";
          break;
        }
        (values ? has_values : has_resources) = true;
        if (!parse_named(value, values ? "values" : "resources",
                         values ? out.values : out.resources) &&
            json_error_)
          return invalid_json(json_error_);
        break;
      }
      default:
        // Any other field is ignored (newer writers may add fields), but it must be valid JSON.
        if (auto code = check_json(value)) return invalid_json(code);
    }
  }

  // The object has been read to its closing brace; anything but whitespace after it is an error.
  const char* rest = nullptr;
  if (!doc.current_location().get(rest)) return invalid_json(simdjson::TRAILING_CONTENT);

  if (!has_schema) {
    error = "missing field 'schema' (expected \"" + std::string(kSampleSchema) + "\")";
    return false;
  }
  if (!schema_error.empty()) {
    error = std::move(schema_error);
    return false;
  }
  if (!field_error_.empty()) {
    error = field_error_;
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
  if (!has_host) out.host.clear();
  if (!has_cohort) out.cohort.clear();
  if (!has_values) out.values.clear();
  if (!has_resources) out.resources.clear();
  out.rank = static_cast<int>(rank);
  out.world_size = static_cast<int>(world_size);
  out.step = step;
  return true;
}

bool SampleLineParser::parse_stages(od::value& value, StepSample& out) {
  od::array array;
  if (auto code = value.get_array().get(array)) {
    if (code != simdjson::INCORRECT_TYPE) {
      json_error_ = code;
      return false;
    }
    field_error_ = "field 'stages' is not an array (" + describe(json_, value) + ")";
    return false;
  }
  // Reuse the caller's StageTime objects and their name strings: in steady state, with the same
  // stages every step, parsing allocates nothing.
  std::size_t count = 0;
  for (auto element_result : array) {
    od::value element;
    if ((json_error_ = element_result.get(element))) return false;
    if (count == out.stages.size()) out.stages.emplace_back();
    if (!parse_stage(element, count, out.stages[count])) return false;
    ++count;
  }
  out.stages.resize(count);
  return true;
}

// `{"name": number or "NaN"/"Infinity"/"-Infinity", ...}` into `out`, reusing its entries (no
// allocation in steady state). Every double reads back bit for bit as the writer wrote it.
bool SampleLineParser::parse_named(od::value& value, const char* field,
                                   std::vector<NamedValue>& out) {
  od::object object;
  if (auto code = value.get_object().get(object)) {
    if (code != simdjson::INCORRECT_TYPE) {
      json_error_ = code;
      return false;
    }
    field_error_ = field_subject(field) + " is not an object (" + describe(json_, value) + ")";
    return false;
  }
  std::size_t count = 0;
  for (auto field_result : object) {
    if ((json_error_ = field_result.error())) return false;
    od::field& entry = field_result.value_unsafe();  // in place (see parse)
    std::string_view name;
    if ((json_error_ = entry.unescaped_key().get(name))) return false;
    od::value& v = entry.value();
    double number = 0.0;
    od::json_type type;
    if ((json_error_ = v.type().get(type))) return false;
    const std::string_view token = raw_token(json_, v);  // for a message, before it is read
    std::string_view text;
    if (type == od::json_type::number && !read_double(json_, v, number)) {
      // a number (a double: exact, as the writer's shortest form reads back)
    } else if (type == od::json_type::string && !v.get_string().get(text) &&
               (text == "NaN" || text == "Infinity" || text == "-Infinity")) {
      number = text == "NaN"        ? std::numeric_limits<double>::quiet_NaN()
               : text == "Infinity" ? std::numeric_limits<double>::infinity()
                                    : -std::numeric_limits<double>::infinity();
    } else {
      field_error_ = "'" + std::string(name) + "' of " + field_subject(field) +
                     " is not a number (" + describe_token(token) +
                     "); expected a number, \"NaN\", \"Infinity\" or \"-Infinity\"";
      return false;
    }
    for (std::size_t i = 0; i < count; ++i) {
      if (out[i].name == name) {
        field_error_ = field_subject(field) + " has '" + std::string(name) + "' twice";
        return false;
      }
    }
    if (count == out.size()) out.emplace_back();
    NamedValue& slot = out[count++];
    if (slot.name != name) slot.name.assign(name.data(), name.size());
    slot.value = number;
  }
  out.resize(count);
  return true;
}

bool SampleLineParser::parse_stage(od::value& value, std::size_t index, StageTime& stage) {
  using State = StageFields::State;
  od::object object;
  if (auto code = value.get_object().get(object)) {
    if (code != simdjson::INCORRECT_TYPE) {
      json_error_ = code;
      return false;
    }
    field_error_ =
        "stage " + std::to_string(index) + " is not an object (" + describe(json_, value) + ")";
    return false;
  }
  StageFields& f = stage_fields_;
  f.reset();
  for (auto field_result : object) {
    if ((json_error_ = field_result.error())) return false;
    od::field& field = field_result.value_unsafe();  // in place (see parse)
    Field key;
    if ((json_error_ = classify(field, stage_field, key))) return false;
    od::value& v = field.value();  // a reference: copying it stalls on store forwarding
    // A field repeated after a bad value keeps its error: the later copy must not hide it (nor the
    // unchecked bytes On-Demand skipped past the bad value).
    const State* seen = key == Field::name    ? &f.name
                        : key == Field::kind  ? &f.kind
                        : key == Field::ms    ? &f.ms
                        : key == Field::calls ? &f.calls
                                              : nullptr;
    if (seen && *seen > State::ok) continue;
    if (key == Field::name) {
      f.name = v.get_string().get(f.name_text) ? State::not_string : State::ok;
      if (f.name != State::ok) f.name_token = raw_token(json_, v);
    } else if (key == Field::kind) {
      f.kind = v.get_string().get(f.kind_text) ? State::not_string : State::ok;
      if (f.kind != State::ok) f.kind_token = raw_token(json_, v);
    } else if (key == Field::ms) {
      if (read_double(json_, v, f.ms_value) || !std::isfinite(f.ms_value)) {
        f.ms = State::not_number;
        f.ms_token = raw_token(json_, v);
      } else {
        f.ms = f.ms_value < 0 ? State::negative : State::ok;
      }
    } else if (key == Field::calls) {
      if (v.get_int64().get(f.calls_value)) {
        f.calls = State::not_number;
        f.calls_token = raw_token(json_, v);
      } else {
        f.calls = f.calls_value < 0                                           ? State::negative
                  : f.calls_value > std::numeric_limits<std::uint32_t>::max() ? State::too_large
                                                                              : State::ok;
      }
    } else if ((json_error_ = check_json(v))) {
      return false;
    }
  }

  // Messages are built only on failure: the good path must not allocate.
  const auto stage_label = [index] { return "stage " + std::to_string(index); };
  if (f.name == State::missing) {
    field_error_ = stage_label() + " has no field 'name'";
    return false;
  }
  if (f.name == State::not_string) {
    field_error_ = field_subject("name", static_cast<long>(index)) + " is not a string (" +
                   describe_token(f.name_token) + ")";
    return false;
  }
  const auto subject = [&](std::string_view field) {
    return field_subject(field, static_cast<long>(index), f.name_text);
  };
  if (f.kind == State::not_string) {
    field_error_ = subject("kind") + " is not a string (" + describe_token(f.kind_token) + ")";
    return false;
  }
  StageKind kind;
  if (f.kind == State::ok) {
    auto parsed = parse_stage_kind(f.kind_text);
    if (!parsed) {
      field_error_ = subject("kind") + " is \"" + std::string(f.kind_text) +
                     "\", expected one of: compute, communication, data, other";
      return false;
    }
    kind = *parsed;
  } else {
    kind = default_stage_kind(f.name_text);
  }
  switch (f.ms) {
    case State::missing:
      field_error_ = stage_label() + " (" + quoted(f.name_text) + ") has no field 'ms'";
      return false;
    case State::not_number:
      field_error_ = subject("ms") + " is not a finite number (" + describe_token(f.ms_token) + ")";
      return false;
    case State::negative:
      field_error_ = subject("ms") + " is negative (" + format_number(f.ms_value) + ")";
      return false;
    default:
      break;
  }
  switch (f.calls) {
    case State::not_number:
      field_error_ =
          subject("calls") + " is not an integer (" + describe_token(f.calls_token) + ")";
      return false;
    case State::negative:
    case State::too_large:
      field_error_ = subject("calls") +
                     (f.calls == State::negative ? " is negative (" : " is too large (") +
                     std::to_string(f.calls_value) + ")";
      return false;
    default:
      break;
  }
  // Names repeat step after step: comparing is cheaper than assigning the same bytes again.
  if (stage.name != f.name_text) stage.name.assign(f.name_text.data(), f.name_text.size());
  stage.kind = kind;
  stage.ms = f.ms_value;
  stage.calls = static_cast<std::uint32_t>(f.calls_value);  // missing → 1 (StageFields default)
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The two halves of the parser, for tests (laggard/detail/sample_parser.hpp)

bool detail::parse_sample_general(std::string_view line, StepSample& out, std::string& error) {
  thread_local SampleLineParser parser;  // one per thread: simdjson's buffers are reused
  return parser.parse_copy(line, out, error, /*fast=*/false);
}

// ---------------------------------------------------------------------------------------------
// SampleParser

struct SampleParser::Impl {
  SampleLineParser parser;
};

SampleParser::SampleParser() : impl_(std::make_unique<Impl>()) {}
SampleParser::~SampleParser() = default;

bool SampleParser::parse(std::string_view line, StepSample& out, std::string& error) {
  return impl_->parser.parse_copy(line, out, error);
}

// ---------------------------------------------------------------------------------------------
// SampleFileReader

struct SampleFileReader::Impl {
  std::string path;
  int fd = -1;
  // The buffer holds `capacity` bytes of file data plus SIMDJSON_PADDING spare bytes, so any line
  // inside it can be parsed in place. [begin, end) is data not yet consumed.
  std::unique_ptr<char[]> buffer;
  std::size_t capacity = 0;
  std::size_t usual_capacity = 0;  // what the buffer goes back to after a long line
  std::size_t begin = 0, end = 0;
  bool eof = false;
  bool at_start = true;  // a UTF-8 byte order mark, if any, is still to be skipped
  // Inside a line longer than kMaxLineBytes: its bytes are dropped as they are read, up to its
  // newline, so that the buffer never grows past the limit. `skipped` counts them.
  bool skipping = false;
  std::uint64_t skipped = 0;

  std::size_t lines = 0, malformed = 0;
  std::uint64_t bytes = 0;
  std::vector<LineError> errors;
  SampleLineParser parser;
  std::string error;  // reused for every bad line

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  void allocate(std::size_t bytes_of_data) {
    // Not zeroed as a whole (that would touch every page before read() does); zero_padding()
    // keeps the bytes simdjson may read past the data initialised.
    buffer.reset(new char[bytes_of_data + simdjson::SIMDJSON_PADDING]);
    capacity = bytes_of_data;
  }

  // The SIMDJSON_PADDING bytes after the data [0, end): a line that ends there is parsed in place.
  void zero_padding() { std::memset(buffer.get() + end, 0, simdjson::SIMDJSON_PADDING); }

  // Moves the unconsumed tail to the front and reads more behind it.
  void fill() {
    const std::size_t tail = end - begin;
    if (begin != 0) {
      if (tail != 0) std::memmove(buffer.get(), buffer.get() + begin, tail);
      begin = 0;
      end = tail;
    }
    if (end == capacity) {  // one line longer than the buffer: grow it, up to the line limit
      std::unique_ptr<char[]> old = std::move(buffer);
      allocate(std::max(capacity, std::min(capacity * 2, kMaxLineBytes + 1)));
      std::memcpy(buffer.get(), old.get(), end);
      zero_padding();
    }
    for (;;) {
      const ssize_t n = ::read(fd, buffer.get() + end, capacity - end);
      if (n > 0) {
        end += static_cast<std::size_t>(n);
        zero_padding();
        return;
      }
      if (n == 0) {
        eof = true;
        ::close(fd);  // release the descriptor early: a run may have thousands of rank files
        fd = -1;
        return;
      }
      if (errno != EINTR) throw InputError("cannot read " + path + ": " + std::strerror(errno));
    }
  }

  // The first read, if it need not wait: the text when it is in the page cache; when it is not,
  // RWF_NOWAIT starts the kernel's read-ahead for it and returns at once. A run opens all its
  // rank files before reading any, so the disk then reads every file's start at once instead of
  // one file after another as the merge first asks each for its first line
  // (docs/notes/performance-ingest.md). Nothing is read here that fill() would not read first.
  void start_reading() {
#if defined(RWF_NOWAIT)
    iovec v{buffer.get(), capacity};
    const ssize_t n = ::preadv2(fd, &v, 1, -1, RWF_NOWAIT);
    if (n > 0) {
      end = static_cast<std::size_t>(n);
      zero_padding();
    }
    // 0 (an empty file, or nothing cached: some kernels) and errors (EAGAIN, not supported):
    // fill() reads as ever, and reports what is wrong.
#endif
  }

  // After a line longer than the usual buffer, once it is read: back to the usual size. A run's
  // readers are open side by side, and each would otherwise keep what its longest line needed.
  void release_long_line() {
    const std::size_t tail = end - begin;
    if (capacity <= usual_capacity || skipping || tail > usual_capacity) return;
    std::unique_ptr<char[]> old = std::move(buffer);
    allocate(usual_capacity);
    if (tail != 0) std::memcpy(buffer.get(), old.get() + begin, tail);
    begin = 0;
    end = tail;
    zero_padding();
  }

  void record(std::size_t line, bool truncated) {
    ++malformed;
    if (errors.size() < kMaxKeptErrors)
      errors.push_back(LineError{
          path, line, truncated ? "truncated line (no newline at end of file): " + error : error});
  }
};

SampleFileReader::SampleFileReader(std::string path, std::size_t chunk_bytes)
    : impl_(std::make_unique<Impl>()) {
  if (chunk_bytes == 0) throw std::invalid_argument("SampleFileReader: chunk_bytes must be > 0");
  impl_->path = std::move(path);
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever.
  impl_->fd = ::open(impl_->path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (impl_->fd < 0) throw InputError("cannot open " + impl_->path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(impl_->fd, &st) != 0)
    throw InputError("cannot read " + impl_->path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw InputError("cannot read " + impl_->path + ": it is a directory");
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
    throw InputError("cannot read " + impl_->path + ": it is a " +
                     (S_ISFIFO(st.st_mode) ? "FIFO" : "socket") + ", not a regular file");
  const int flags = ::fcntl(impl_->fd, F_GETFL);
  if (flags >= 0) ::fcntl(impl_->fd, F_SETFL, flags & ~O_NONBLOCK);
  // Read front to back once: a larger read-ahead for files not in the page cache.
  if (S_ISREG(st.st_mode)) ::posix_fadvise(impl_->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // A small file gets a buffer its size: a run of thousands of short rank files need not hold
  // a full chunk per file. A file that grows while it is read still works, through more reads.
  constexpr std::uint64_t kMinBuffer = 4096;
  std::uint64_t capacity = chunk_bytes;
  if (S_ISREG(st.st_mode))
    capacity =
        std::min<std::uint64_t>(capacity, std::max<std::uint64_t>(st.st_size + 1, kMinBuffer));
  impl_->allocate(static_cast<std::size_t>(capacity));
  impl_->zero_padding();
  impl_->usual_capacity = impl_->capacity;
  if (S_ISREG(st.st_mode)) impl_->start_reading();
}

SampleFileReader::~SampleFileReader() = default;

bool SampleFileReader::next(StepSample& out) {
  Impl& s = *impl_;
  for (;;) {
    if (LAGGARD_UNLIKELY(s.capacity > s.usual_capacity)) s.release_long_line();
    char* data = s.buffer.get();
    const char* line = data + s.begin;
    const std::size_t available = s.end - s.begin;
    if (LAGGARD_UNLIKELY(s.at_start)) {
      if (available < 3 && !s.eof) {  // too little read yet to tell
        s.fill();
        continue;
      }
      s.at_start = false;
      // Some Windows tools start UTF-8 text with a byte order mark, which JSON does not allow.
      if (available >= 3 && std::memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
        s.begin += 3;
        s.bytes += 3;
      }
      continue;
    }
    // A line in laggard's own layout is parsed before its end is found: the parse finds it (a
    // search for the '\n' first read every line twice). Anything else takes the way below.
    if (LAGGARD_LIKELY(!s.skipping && available != 0 && *line == '{')) {
      if (const char* stop = detail::parse_sample_line_fast(line, data + s.end, s.eof, out)) {
        const auto length = static_cast<std::size_t>(stop - line);
        if (LAGGARD_LIKELY(length <= kMaxLineBytes)) {
          const std::size_t taken = length + (stop != data + s.end ? 1 : 0);  // with its '\n'
          s.begin += taken;
          s.bytes += taken;
          ++s.lines;
          if (LAGGARD_UNLIKELY(s.capacity > s.usual_capacity)) s.release_long_line();
          return true;
        }
      }
    }
    const void* newline = available ? std::memchr(line, '\n', available) : nullptr;
    if (LAGGARD_UNLIKELY(s.skipping)) {  // the rest of a line over the limit: drop it
      const std::size_t part =
          newline ? static_cast<std::size_t>(static_cast<const char*>(newline) - line) : available;
      s.skipped += part;
      s.bytes += part;
      s.begin += part;
      if (!newline && !s.eof) {
        s.fill();
        continue;
      }
      if (newline) {
        ++s.begin;
        ++s.bytes;
      }
      s.skipping = false;
      ++s.lines;
      s.error = line_too_long(s.skipped);
      s.record(s.lines, /*truncated=*/newline == nullptr);
      continue;
    }
    std::size_t length;
    if (newline) {
      length = static_cast<std::size_t>(static_cast<const char*>(newline) - line);
      s.begin += length + 1;
      s.bytes += length + 1;
    } else if (!s.eof) {
      if (LAGGARD_UNLIKELY(available > kMaxLineBytes)) {  // no newline within the limit
        s.skipping = true;
        s.skipped = 0;
      } else {
        s.fill();
      }
      continue;
    } else if (available) {  // last line, without '\n'
      length = available;
      s.begin = s.end;
      s.bytes += length;
    } else {
      return false;
    }
    ++s.lines;
    if (LAGGARD_UNLIKELY(length > kMaxLineBytes)) {  // a chunk larger than the limit holds it
      s.error = line_too_long(length);
      s.record(s.lines, /*truncated=*/newline == nullptr);
      continue;
    }
    if (is_blank(std::string_view(line, length))) continue;
    const std::size_t room =
        s.capacity + simdjson::SIMDJSON_PADDING - static_cast<std::size_t>(line - data);
    if (LAGGARD_LIKELY(
            s.parser.parse(simdjson::padded_string_view(line, length, room), out, s.error))) {
      if (LAGGARD_UNLIKELY(s.capacity > s.usual_capacity)) s.release_long_line();
      return true;
    }
    s.record(s.lines, /*truncated=*/newline == nullptr);
  }
}

const std::string& SampleFileReader::path() const noexcept { return impl_->path; }
std::size_t SampleFileReader::lines() const noexcept { return impl_->lines; }
std::size_t SampleFileReader::malformed() const noexcept { return impl_->malformed; }
std::uint64_t SampleFileReader::bytes() const noexcept { return impl_->bytes; }
const std::vector<LineError>& SampleFileReader::errors() const noexcept { return impl_->errors; }

void SampleFileReader::prefetch() const noexcept {
  const Impl& s = *impl_;
  const char* p = s.buffer.get() + s.begin;
  const std::size_t n = std::min<std::size_t>(s.end - s.begin, 768);
  for (std::size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off);
}

}  // namespace laggard
