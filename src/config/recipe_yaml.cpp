// Recipe <-> YAML. The schema (key names, their order, and misspellings worth a hint) is written
// once, in the visit() functions of config/recipe_schema.h; reading, printing and listing keys all
// walk it.
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "config/recipe.h"
#include "config/recipe_schema.h"
#include "config/suggest.h"
#include "io/atomic_file.h"

namespace attnlab {
namespace {

using namespace recipe_schema;

using Aliases = std::initializer_list<const char*>;

std::string join_path(const std::string& prefix, const char* key) {
  return prefix.empty() ? std::string(key) : prefix + "." + key;
}

// ---- key listing ------------------------------------------------------------------------------

// The keys of one section (not recursive), with their aliases mapped to the real key.
struct KeyLister {
  std::vector<std::string> keys;
  std::vector<std::pair<std::string, std::string>> spellings;  // (spelling, key)
  template <class T>
  void field(const char* key, const T&, Aliases aliases = {}) {
    keys.emplace_back(key);
    spellings.emplace_back(key, key);
    for (const char* a : aliases) spellings.emplace_back(a, key);
  }
  template <class S>
  void section(const char* key, const S& s, Aliases aliases = {}) {
    field(key, s, aliases);
  }
};

struct PathLister {
  std::string prefix;
  std::vector<std::string>* out;
  template <class T>
  void field(const char* key, const T&, Aliases = {}) {
    out->push_back(join_path(prefix, key));
  }
  template <class S>
  void section(const char* key, const S& s, Aliases = {}) {
    PathLister sub{join_path(prefix, key), out};
    visit(sub, s);
  }
};

// ---- reading ----------------------------------------------------------------------------------

// Where values come from: a file (messages give file:line) or one --set argument.
struct Source {
  std::string name;  // "recipes/x.yaml" or "--set 'a.b=1'"
  bool has_lines = false;
  std::map<std::string, std::string>* locations = nullptr;  // key path -> where it was set
  int line = -1;  // >= 0: the line to name whatever the node (an empty value: its key's line)

  std::string where(const YAML::Node& node) const {
    if (has_lines && line >= 0) return name + ":" + std::to_string(line + 1);
    if (!has_lines || node.Mark().is_null()) return name;
    return name + ":" + std::to_string(node.Mark().line + 1);
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& msg) const {
    throw Error(where(node) + ": " + msg);
  }
};

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "'" + n.Scalar() + "'";
}

const std::string& scalar_text(const YAML::Node& n, const std::string& path, const Source& src,
                               const char* expected) {
  if (!n.IsScalar())
    src.fail(n, strformat("%s: expected %s, got %s", path.c_str(), expected, describe(n).c_str()));
  return n.Scalar();
}

// Integers: "123", "-4", "1_000_000", or a float spelling of an exact integer ("4e6").
bool parse_int64(std::string text, int64_t& out) {
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    bool between_digits = i > 0 && i + 1 < text.size() &&
                          std::isdigit((unsigned char)text[i - 1]) &&
                          std::isdigit((unsigned char)text[i + 1]);
    if (text[i] == '_' && between_digits) continue;
    digits += text[i];
  }
  const char* b = digits.data();
  const char* e = b + digits.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec == std::errc() && p == e) return true;
  if (ec == std::errc::result_out_of_range) return false;
  double d = 0;
  auto [pd, ecd] = std::from_chars(b, e, d);
  if (ecd != std::errc() || pd != e || !std::isfinite(d) || d != std::floor(d) ||
      std::fabs(d) > 9.0e15)
    return false;
  out = int64_t(d);
  return true;
}

bool parse_double(const std::string& text, double& out) {
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && std::isfinite(out);
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src, int64_t& out) {
  const std::string& s = scalar_text(n, path, src, "an integer");
  if (!parse_int64(s, out))
    src.fail(n, strformat("%s: expected an integer, got '%s'", path.c_str(), s.c_str()));
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src, int& out) {
  int64_t v = 0;
  read_value(n, path, src, v);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    src.fail(n, strformat("%s: %lld does not fit a 32-bit integer", path.c_str(), (long long)v));
  out = int(v);
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src, double& out) {
  const std::string& s = scalar_text(n, path, src, "a float");
  if (!parse_double(s, out))
    src.fail(n, strformat("%s: expected a float, got '%s'", path.c_str(), s.c_str()));
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src, bool& out) {
  const std::string& s = scalar_text(n, path, src, "true or false");
  static const char* kTrue[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const char* kFalse[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* t : kTrue)
    if (s == t) return void(out = true);
  for (const char* f : kFalse)
    if (s == f) return void(out = false);
  src.fail(n, strformat("%s: expected true or false, got '%s'", path.c_str(), s.c_str()));
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src, std::string& out) {
  if (n.IsNull()) return void(out.clear());  // "key:" with nothing after it
  out = scalar_text(n, path, src, "a string");
}

void read_value(const YAML::Node& n, const std::string& path, const Source& src,
                std::vector<std::string>& out) {
  if (n.IsNull()) return void(out.clear());
  if (!n.IsSequence())
    src.fail(n, strformat("%s: expected a list of strings such as [a, b], got %s", path.c_str(),
                          describe(n).c_str()));
  std::vector<std::string> items;
  for (size_t i = 0; i < n.size(); ++i) {
    items.emplace_back();
    read_value(n[i], strformat("%s[%zu]", path.c_str(), i), src, items.back());
  }
  out = std::move(items);
}

template <RecipeEnum E>
std::vector<std::string> enum_names() {
  return {EnumNames<E>::names.begin(), EnumNames<E>::names.end()};
}

template <RecipeEnum E>
void read_value(const YAML::Node& n, const std::string& path, const Source& src, E& out) {
  const std::string& s = scalar_text(n, path, src, "a name");
  const auto& names = EnumNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (s == names[i]) return void(out = static_cast<E>(i));
  const std::string valid = join_names(enum_names<E>());
  for (std::string_view f : EnumNames<E>::future)
    if (s == f)
      src.fail(n, strformat("%s '%s' is not supported yet (valid: %s)", path.c_str(), s.c_str(),
                            valid.c_str()));
  std::string hint = closest_match(s, enum_names<E>());
  src.fail(
      n, strformat("%s '%s' is not a valid value (valid: %s)%s", path.c_str(), s.c_str(),
                   valid.c_str(), hint.empty() ? "" : ("; did you mean '" + hint + "'?").c_str()));
}

std::string unknown_key_message(const std::string& prefix, const std::string& key,
                                const KeyLister& keys) {
  const std::string full = join_path(prefix, key.c_str());
  const char* what = prefix.empty() ? "section" : "key";
  std::vector<std::string> spellings;
  for (const auto& s : keys.spellings) spellings.push_back(s.first);
  std::string hint = closest_match(key, spellings);
  if (!hint.empty()) {
    for (const auto& s : keys.spellings)
      if (s.first == hint) hint = join_path(prefix, s.second.c_str());
  } else {
    // The right key in the wrong section ("train.lr" -> "optim.lr").
    for (const std::string& p : recipe_key_paths()) {
      std::string last = p.substr(p.rfind('.') + 1);
      if (last == key) {
        hint = p;
        break;
      }
    }
  }
  if (!hint.empty())
    return strformat("unknown %s '%s'; did you mean '%s'?", what, full.c_str(), hint.c_str());
  return strformat("unknown %s '%s' (valid %ss%s%s: %s)", what, full.c_str(), what,
                   prefix.empty() ? "" : " in ", prefix.c_str(), join_names(keys.keys).c_str());
}

template <class S>
void read_section(const YAML::Node& n, const std::string& prefix, const Source& src, S& s);

// Reads the keys present in one map node into the fields of a section.
struct FieldReader {
  const YAML::Node& map;
  const std::string& prefix;
  const Source& src;

  template <class T>
  void field(const char* key, T& value, Aliases = {}) {
    const YAML::Node n = map[key];
    if (!n.IsDefined()) return;
    const std::string path = join_path(prefix, key);
    Source at = src;  // an empty value has no place of its own (yaml-cpp marks the next token)
    if (n.IsNull()) {
      for (auto it = map.begin(); it != map.end(); ++it)
        if (it->first.IsScalar() && it->first.Scalar() == key && !it->first.Mark().is_null())
          at.line = it->first.Mark().line;
    }
    read_value(n, path, at, value);
    if (src.locations) (*src.locations)[path] = at.where(n);
  }
  template <class S>
  void section(const char* key, S& s, Aliases = {}) {
    const YAML::Node n = map[key];
    if (n.IsDefined()) read_section(n, join_path(prefix, key), src, s);
  }
};

template <class S>
void read_section(const YAML::Node& n, const std::string& prefix, const Source& src, S& s) {
  if (n.IsNull()) return;  // "train:" with no keys: all defaults
  if (!n.IsMap()) {
    if (prefix.empty())
      src.fail(n, "a recipe must be a map of sections (model:, train:, ...), got " + describe(n));
    src.fail(n,
             strformat("%s: expected a map of keys, got %s", prefix.c_str(), describe(n).c_str()));
  }
  KeyLister keys;
  visit(keys, s);
  std::map<std::string, YAML::Node> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) src.fail(key, "keys must be plain names, got " + describe(key));
    const std::string& name = key.Scalar();
    bool known = false;
    for (const std::string& k : keys.keys) known |= (k == name);
    if (!known) src.fail(key, unknown_key_message(prefix, name, keys));
    auto [prev, inserted] = seen.emplace(name, key);
    if (!inserted)
      src.fail(key,
               strformat("duplicate key '%s' (first set at %s)",
                         join_path(prefix, name.c_str()).c_str(), src.where(prev->second).c_str()));
  }
  FieldReader reader{n, prefix, src};
  visit(reader, s);
}

// "a.b=value" -> ("a.b", value node). Flow lists/maps and quoted strings are parsed as YAML; any
// other text is taken verbatim (so globs such as *.bin and strings with '#' survive).
std::pair<std::string, YAML::Node> parse_override(const std::string& arg) {
  const std::string where = "--set '" + arg + "'";
  const size_t eq = arg.find('=');
  auto syntax_error = [&] {
    ATTN_FAIL("%s: expected key=value with a dotted key, e.g. --set optim.lr=3e-4", where.c_str());
  };
  if (eq == std::string::npos || eq == 0) syntax_error();
  const std::string key = arg.substr(0, eq);
  const std::string text = arg.substr(eq + 1);
  bool prev_dot = true;
  for (char c : key) {
    bool dot = c == '.';
    if ((dot && prev_dot) || !(dot || std::isalnum((unsigned char)c) || c == '_' || c == '-'))
      syntax_error();
    prev_dot = dot;
  }
  if (prev_dot) syntax_error();
  const char first = text.empty() ? '\0' : text[0];
  if (first == '[' || first == '{' || first == '"' || first == '\'') {
    try {
      return {key, YAML::Load(text)};
    } catch (const YAML::Exception& e) {
      ATTN_FAIL("%s: invalid YAML value: %s", where.c_str(), e.msg.c_str());
    }
  }
  return {key, YAML::Node(text)};
}

// {a: {b: value}} for key "a.b", so that an override goes through the same reader as the file.
YAML::Node nest(const std::string& key, const YAML::Node& value) {
  YAML::Node map(YAML::NodeType::Map);
  const size_t dot = key.find('.');
  if (dot == std::string::npos) {
    map[key] = value;
  } else {
    map[key.substr(0, dot)] = nest(key.substr(dot + 1), value);
  }
  return map;
}

// ---- printing ---------------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += strformat("\\x%02x", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string format_value(const std::string& v) { return quote(v); }
std::string format_value(int v) { return std::to_string(v); }
std::string format_value(int64_t v) { return std::to_string(v); }
std::string format_value(bool v) { return v ? "true" : "false"; }
template <RecipeEnum E>
std::string format_value(E v) {
  return std::string(enum_name(v));
}
std::string format_value(double v) {
  // Shortest text that reads back to the same double; always with a '.' so it reads as a float.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  ATTN_ASSERT(ec == std::errc());
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) return s + ".0";  // "1" -> "1.0"
  size_t e = s.find('e');
  if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
  return s;
}
std::string format_value(const std::vector<std::string>& v) {
  std::vector<std::string> items;
  for (const std::string& s : v) items.push_back(quote(s));
  return "[" + join_names(items) + "]";
}

struct Printer {
  std::string indent;
  std::string* out;
  template <class T>
  void field(const char* key, const T& value, Aliases = {}) {
    *out += indent + key + ": " + format_value(value) + "\n";
  }
  template <class S>
  void section(const char* key, const S& s, Aliases = {}) {
    *out += indent + key + ":\n";
    Printer sub{indent + "  ", out};
    visit(sub, s);
  }
};

}  // namespace

std::vector<std::string> recipe_key_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    PathLister lister{"", &out};
    const Recipe r{};
    visit(lister, r);
    return out;
  }();
  return paths;
}

namespace {

void flatten(const YAML::Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node)
      flatten(
          kv.second,
          prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(),
          out);
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out.emplace_back(prefix, e.c_str());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> recipe_leaves(const Recipe& recipe) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten(YAML::Load(recipe_to_yaml(recipe)), "", out);
  return out;
}

std::string recipe_to_yaml(const Recipe& recipe) {
  std::string out = std::string(kResolvedRecipeHeader) + "\n";
  Printer printer{"", &out};
  visit(printer, recipe);
  return out;
}

Recipe parse_recipe(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides, RecipeUse use) {
  std::map<std::string, std::string> locations;
  const Source file{source_name, true, &locations};
  const YAML::Node root = [&] {
    try {
      // A second document ("---") would be dropped by YAML::Load without a word.
      std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
      std::erase_if(docs, [](const YAML::Node& d) { return d.IsNull(); });  // a bare ---
      ATTN_REQUIRE(docs.size() <= 1,
                   "%s: holds %zu YAML documents (separated by ---); a recipe is one document",
                   source_name.c_str(), docs.size());
      return docs.empty() ? YAML::Node() : docs[0];
    } catch (const YAML::ParserException& e) {
      ATTN_FAIL("%s:%d: YAML syntax error: %s", source_name.c_str(), e.mark.line + 1,
                e.msg.c_str());
    }
  }();

  std::vector<std::pair<Source, YAML::Node>> sets;
  for (const std::string& arg : overrides) {
    auto [key, value] = parse_override(arg);
    sets.emplace_back(Source{"--set '" + arg + "'", false, &locations}, nest(key, value));
  }

  Recipe recipe;
  // The family's block choices, then the preset, go first so that explicit keys (file or --set)
  // win over them.
  std::string preset;
  std::optional<ModelFamily> family;
  auto probe_preset = [&](const YAML::Node& tree, const Source& src) {
    if (!tree.IsMap()) return;
    const YAML::Node model = tree["model"];
    const std::string prefix = "model";
    if (!model.IsDefined() || !model.IsMap()) return;
    FieldReader{model, prefix, src}.field("preset", preset);
    if (model["family"].IsDefined()) {
      ModelFamily f = ModelFamily::gpt2;
      FieldReader{model, prefix, src}.field("family", f);
      family = f;
    }
  };
  probe_preset(root, file);
  for (const auto& [src, tree] : sets) probe_preset(tree, src);
  if (family) apply_family_defaults(recipe.model, *family);
  try {
    apply_model_preset(recipe.model, preset);
  } catch (const ConfigError& e) {
    throw Error(locations["model.preset"] + ": " + e.what());
  }
  if (family && !preset.empty() && recipe.model.family != *family)
    ATTN_FAIL("%s: model.family '%s' contradicts model.preset '%s' (a %s model); drop one of them",
              locations["model.family"].c_str(), std::string(enum_name(*family)).c_str(),
              preset.c_str(), std::string(enum_name(recipe.model.family)).c_str());

  read_section(root, "", file, recipe);
  for (const auto& [src, tree] : sets) read_section(tree, "", src, recipe);

  // Which keys the file and --set gave (a preset gives the keys it sets): train.init_from takes
  // the others from its checkpoint, and eval compares only these with the model.
  for (const auto& [key, where] : locations) recipe.given.where[key] = where;
  if (!preset.empty())
    for (const std::string& k : model_preset_keys(preset))
      recipe.given.where.emplace("model." + k, locations["model.preset"]);

  try {
    recipe.validate(use);
  } catch (const ConfigError& e) {
    auto it = locations.find(e.key_path());
    throw Error((it != locations.end() ? it->second : source_name) + ": " + e.what());
  }
  // Where the recipe gives the scaling's type (else a checkpoint may: the trainer checks then).
  if (recipe.given.contains("model.rope_scaling.type"))
    if (const std::string p = rope_scaling_key_problem(recipe, true); !p.empty()) throw Error(p);
  return recipe;
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   RecipeUse use) {
  const std::string text = io::read_file(path, "recipe");
  // A file of nothing but comments, blank lines and document markers gives every default (a 124M
  // GPT-2) where --set gives nothing either: taken for a wrong or emptied file, not a choice.
  bool has_content = !overrides.empty();
  for (size_t i = 0; i < text.size() && !has_content;) {
    const size_t eol = std::min(text.find('\n', i), text.size());
    const size_t first = text.find_first_not_of(" \t\r", i);
    const std::string_view line(text.data() + std::min(first, eol), eol - std::min(first, eol));
    has_content =
        first < eol && text[first] != '#' && !line.starts_with("---") && !line.starts_with("...");
    i = eol + 1;
  }
  ATTN_REQUIRE(has_content,
               "recipe '%s' is empty (only comments or blank lines); it would train every "
               "default (a 124M GPT-2 on synthetic data): give at least one key, e.g. "
               "model: {preset: gpt2}",
               path.c_str());
  Recipe r = parse_recipe(text, path, overrides, use);
  if (r.train.name.empty()) r.train.name = std::filesystem::path(path).stem().string();
  return r;
}

}  // namespace attnlab
