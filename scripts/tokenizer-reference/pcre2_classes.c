// Prints the code points PCRE2 (as linked, with PCRE2_UCP) puts in \p{L}, \p{N} and \s, one class per line
// ("L 41 42 ...", hex), and its Unicode version on stderr. Used by unicode-gap.js.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>

static int utf8(unsigned c, unsigned char* o) {
  if (c < 0x80) return o[0] = (unsigned char)c, 1;
  if (c < 0x800) return o[0] = 0xC0 | c >> 6, o[1] = 0x80 | (c & 63), 2;
  if (c < 0x10000) return o[0] = 0xE0 | c >> 12, o[1] = 0x80 | ((c >> 6) & 63), o[2] = 0x80 | (c & 63), 3;
  o[0] = 0xF0 | c >> 18, o[1] = 0x80 | ((c >> 12) & 63), o[2] = 0x80 | ((c >> 6) & 63), o[3] = 0x80 | (c & 63);
  return 4;
}

int main(void) {
  const char* patterns[] = {"^\\p{L}$", "^\\p{N}$", "^\\s$"};
  const char* names[] = {"L", "N", "s"};
  for (int p = 0; p < 3; ++p) {
    int err;
    PCRE2_SIZE at;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)patterns[p], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!re) return 1;
    pcre2_match_data* md = pcre2_match_data_create(4, NULL);
    printf("%s", names[p]);
    for (unsigned c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c < 0xE000) continue;
      unsigned char b[4];
      if (pcre2_match(re, b, (PCRE2_SIZE)utf8(c, b), 0, 0, md, NULL) >= 0) printf(" %X", c);
    }
    printf("\n");
    pcre2_match_data_free(md);
    pcre2_code_free(re);
  }
  char version[32];
  pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version);
  fprintf(stderr, "%s\n", version);
  return 0;
}
