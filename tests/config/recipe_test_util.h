// Shared by the recipe tests (test_recipe.cpp, test_recipe_variants.cpp).
#pragma once

#include <string>
#include <vector>

#include "config/recipe.h"
#include "test_util.h"

namespace attnlab::test {

// The message of parsing `yaml` (as "x.yaml", with the --set overrides `sets`), "" if it parses.
inline std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return thrown_message([&] { parse_recipe(yaml, "x.yaml", sets); });
}

}  // namespace attnlab::test
