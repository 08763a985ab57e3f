// The metrics names of a mixture's sources (data_tokens/<name>) are all different, whatever the
// entries: two sources writing one metrics field would lose one's count without a word.
#include <gtest/gtest.h>

#include <set>

#include "ctitan/train/job_setup.h"

namespace ctitan::train::mixture_source_names_test {
namespace {

std::vector<std::string> names_of(const std::vector<std::pair<std::string, std::string>>& paths_and_names) {
  std::vector<config::DatasetSource> sources;
  for (const auto& [path, name] : paths_and_names) sources.push_back({path, "auto", 1.0, "text", name});
  return mixture_source_names(sources);
}

TEST(MixtureSourceNames, ThePathsLastComponentOrTheGlobsFolder) {
  EXPECT_EQ(names_of({{"data/fineweb/*.parquet", ""}, {"code.jsonl.zst", ""}, {"books/", ""}, {"./wiki/.", ""}}),
            (std::vector<std::string>{"fineweb", "code.jsonl.zst", "books", "wiki"}));
  EXPECT_EQ(names_of({{"a/web", "mine"}, {"b", ""}}), (std::vector<std::string>{"mine", "b"}));
}

TEST(MixtureSourceNames, CollisionsGetTheIndexAndStillDiffer) {
  for (const auto& entries : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"a/web", ""}, {"b/web", ""}},
           {{"a/web", ""}, {"b/web", ""}, {"c", "web1"}},  // an explicit name equal to a suffixed one
           {{"x/web", ""}, {"y/web", ""}, {"web1", ""}},   // a derived name equal to a suffixed one
           {{".", ""}, {"0", ""}},                         // an empty name, and the index as a name
           {{"web", ""}, {"web", ""}, {"web", ""}, {"q", "web0"}}}) {
    const auto names = names_of(entries);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << ::testing::PrintToString(names);
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_FALSE(names[i].empty());
      if (!entries[i].second.empty()) EXPECT_EQ(names[i], entries[i].second);  // explicit names are kept
    }
  }
  EXPECT_EQ(names_of({{"a/web", ""}, {"b/web", ""}}), (std::vector<std::string>{"web0", "web1"}));
}

}  // namespace
}  // namespace ctitan::train::mixture_source_names_test
