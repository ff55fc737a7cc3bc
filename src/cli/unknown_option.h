// Errors for mistyped command-line options. CLI11 reports an unknown option of a subcommand as
// "The following arguments were not expected: 20 --max-tokens"; this names the option, the
// subcommand, the closest valid option and where the list is.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace attnlab::cli {

// For the arguments of a parse that failed with extra arguments (CLI::ExtrasError): the message
// for the first argument that looks like an option (-x, --name, --name=value) and is none of the
// parsed subcommand's (or the app's, without one), e.g. "generate: unknown option '--max-tokens'
// (did you mean '--max-new-tokens'?); `attnlab generate --help` lists the options". "" when every
// such argument is an option (the extra is a positional argument: CLI11's message stands).
std::string unknown_option_message(const CLI::App& app, const std::vector<std::string>& args);

// For a parse that found no subcommand: the message for the first argument as a mistyped command
// ("unknown command 'trian' (did you mean 'train'?); the commands: train, eval, ...") or, when it
// is an option, as an option given before any command; "" without arguments (CLI11's message
// stands).
std::string unknown_command_message(const CLI::App& app, const std::vector<std::string>& args);

// The closest option name for a mistyped one (without dashes): by edit distance (closest_match),
// else the option sharing the most '-'-separated words with it, at least half of its words
// ("max-tokens" -> "max-new-tokens"); "" when none is close.
std::string closest_option(const std::string& word, const std::vector<std::string>& names);

}  // namespace attnlab::cli
