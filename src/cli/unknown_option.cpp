#include "cli/unknown_option.h"

#include <algorithm>

#include "config/suggest.h"
#include "core/error.h"

namespace attnlab::cli {

namespace {

std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find('-', at), s.size());
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace

std::string closest_option(const std::string& word, const std::vector<std::string>& names) {
  if (std::string c = closest_match(word, names); !c.empty()) return c;
  const std::vector<std::string> mine = words_of(word);
  std::string best;
  size_t best_shared = 0;
  for (const std::string& n : names) {
    size_t shared = 0;
    for (const std::string& w : words_of(n)) shared += std::count(mine.begin(), mine.end(), w) > 0;
    if (shared > best_shared) {
      best_shared = shared;
      best = n;
    }
  }
  return best_shared > 0 && 2 * best_shared >= mine.size() ? best : "";
}

std::string unknown_option_message(const CLI::App& app, const std::vector<std::string>& args) {
  const std::vector<CLI::App*> subs = app.get_subcommands();
  const CLI::App& sub = subs.empty() ? app : *subs.front();
  std::vector<std::string> longs, shorts;
  for (const CLI::Option* o : sub.get_options()) {
    for (const std::string& n : o->get_lnames()) longs.push_back(n);
    for (const std::string& n : o->get_snames()) shorts.push_back(n);
  }
  for (const std::string& a : args) {
    if (a.size() < 2 || a[0] != '-' || a == "--") continue;
    const bool is_long = a[1] == '-';
    const std::string name = a.substr(is_long ? 2 : 1, a.find('=') - (is_long ? 2 : 1));
    if (name.empty() || (name[0] >= '0' && name[0] <= '9') || name[0] == '.') continue;  // -1, -.5
    const std::vector<std::string>& known = is_long ? longs : shorts;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string dash = is_long ? "--" : "-";
    // (one-letter options are all within one edit of each other: no hint)
    const std::string hint = is_long ? closest_option(name, longs) : "";
    const std::string where = subs.empty() ? "attnlab" : "attnlab " + sub.get_name();
    return strformat("%s: unknown option '%s%s'%s; `%s --help` lists the options",
                     subs.empty() ? "attnlab" : sub.get_name().c_str(), dash.c_str(), name.c_str(),
                     hint.empty()
                         ? ""
                         : strformat(" (did you mean '%s%s'?)", dash.c_str(), hint.c_str()).c_str(),
                     where.c_str());
  }
  return "";
}

std::string unknown_command_message(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args[0].empty() || !app.get_subcommands().empty()) return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (args[0][0] == '-') {  // an option before any command (--help and --version parse)
    return strformat(
        "unknown option '%s': options follow a command, one of %s (`attnlab "
        "COMMAND --help` lists its options)",
        args[0].c_str(), join_names(names).c_str());
  }
  const std::string hint = closest_match(args[0], names);
  return strformat("unknown command '%s'%s; the commands: %s (`attnlab --help`)", args[0].c_str(),
                   hint.empty() ? "" : strformat(" (did you mean '%s'?)", hint.c_str()).c_str(),
                   join_names(names).c_str());
}

}  // namespace attnlab::cli
