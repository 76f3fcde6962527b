// Plain app logic that needs no window: the model view's layer/head filters.
#include <catch2/catch.hpp>

#include <set>

#include "app/figures.h"
#include "app/glyphs.h"

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

TEST_CASE("UI glyphs: characters outside the base ranges are collected once, bad bytes skipped", "[app][viz]") {
  difflens::app::GlyphNeeds g;
  CHECK_FALSE(g.add("Hello, λ — A1 − λA2 ≤ 1"));  // all in the base ranges
  CHECK(g.codepoints().empty());
  CHECK(g.add("Привет 差分"));  // Cyrillic and CJK
  CHECK(g.codepoints() == std::set<uint32_t>{0x41F, 0x440, 0x438, 0x432, 0x435, 0x442, 0x5DEE, 0x5206});
  CHECK_FALSE(g.add("вет差"));  // nothing new
  // Emoji (beyond U+FFFF), invalid and truncated UTF-8, overlong forms and controls add nothing.
  CHECK_FALSE(g.add("\xF0\x9F\xA4\x97 \xFF\xFE \xE5\xB7 \xC0\xAF \x01\x7F"));
  CHECK_FALSE(g.add("\xE5\xB7\xAE"));  // 差 again
  CHECK(g.codepoints().size() == 8);
}
