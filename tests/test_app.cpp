// Plain app logic that needs no window: the model view's layer/head filters.
#include <catch2/catch.hpp>

#include "app/figures.h"

using difflens::app::parse_index_filter;

TEST_CASE("model view filters: ranges and lists, clipped to what exists", "[app][viz]") {
  CHECK(parse_index_filter("", 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_index_filter(" , ", 3) == std::vector<int>{0, 1, 2});
  CHECK(parse_index_filter("0-2,7", 10) == std::vector<int>{0, 1, 2, 7});
  CHECK(parse_index_filter("7, 0 - 1", 10) == std::vector<int>{0, 1, 7});  // sorted, spaces allowed
  CHECK(parse_index_filter("3-100", 6) == std::vector<int>{3, 4, 5});      // clipped to n
  CHECK(parse_index_filter("5-2", 6).empty());                             // an empty range
  CHECK(parse_index_filter("x,2,-1", 6) == std::vector<int>{2});           // junk and negatives ignored
  CHECK(parse_index_filter("1,1,1", 4) == std::vector<int>{1});
  CHECK(parse_index_filter("9", 4).empty());
}
