// "Did you mean ...?" for user-facing errors: the closest of a list of valid spellings.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

// Edit distance counting insertions, deletions, substitutions and swaps of two adjacent
// characters as 1 each (optimal string alignment), case-sensitive.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is close enough to be a plausible typo (distance at
// most max(1, word.size() / 3), compared case-insensitively); "" when none is. Ties go to the
// earlier candidate.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// "a, b, c"
std::string join_names(const std::vector<std::string>& names, std::string_view sep = ", ");

}  // namespace attnlab
