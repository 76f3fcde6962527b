// GL rendering under a real (Xvfb) display: the causal triangle lands top-right, colours follow the
// colormap, and reading a target back gives rows top first. Skipped with a reason when no display exists.
#include <catch2/catch.hpp>

#include <GLFW/glfw3.h>

#include <cmath>
#include <limits>

#include "helpers.h"
#include "viz/heatmap_renderer.h"
#include "viz/heatmap_view.h"

using namespace difflens;
using namespace difflens::viz;

namespace {

// A hidden window with a GL 3.3 core context for the whole test binary run.
struct GlContext {
  GLFWwindow* window = nullptr;
  GlContext() {
    if (!glfwInit()) difflens::test::skip("no display for OpenGL (run under xvfb-run; scripts/test does)");
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
    window = glfwCreateWindow(64, 64, "difflens-test", nullptr, nullptr);
    if (!window) difflens::test::skip("could not create an OpenGL 3.3 core context");
    glfwMakeContextCurrent(window);
  }
  ~GlContext() {
    glfwDestroyWindow(window);
    glfwTerminate();
  }
};

}  // namespace

TEST_CASE("GL: a causal map renders with its empty triangle at the top right", "[gl][viz]") {
  GlContext gl;
  const HeatmapRenderer renderer;
  // 8×8 causal map: row i spreads 1/(i+1) over keys 0..i; the future is NaN after pooling.
  std::vector<float> m(64, 0.0f);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j <= i; ++j) m[static_cast<size_t>(i * 8 + j)] = 1.0f / static_cast<float>(i + 1);
  MapTexture tex;
  tex.upload(pool_map(m.data(), 8, 8, 8, 8, Pooling::Max, true));
  RenderTarget target;
  target.resize(160, 160);  // 20 pixels per cell
  HeatmapStyle style;
  style.range = {1.0, false};
  renderer.draw(tex, style, target);
  const auto px = target.read_rgb();
  auto at = [&](int x, int y) {
    const size_t o = (static_cast<size_t>(y) * 160 + static_cast<size_t>(x)) * 3;
    return Rgb8{px[o], px[o + 1], px[o + 2]};
  };
  auto same = [](Rgb8 a, Rgb8 b) {
    return std::abs(a.r - b.r) <= 1 && std::abs(a.g - b.g) <= 1 && std::abs(a.b - b.b) <= 1;
  };
  CHECK(same(at(150, 10), style.masked));                      // query 0, key 7: future → top right
  CHECK(same(at(10, 10), sequential_colormap().at(1.0)));      // query 0, key 0: weight 1
  CHECK(same(at(10, 150), sequential_colormap().at(0.125)));   // query 7, key 0: 1/8 → bottom left
  CHECK(same(at(150, 150), sequential_colormap().at(0.125)));  // query 7, key 7: diagonal
  CHECK_FALSE(same(at(10, 150), at(10, 10)));                  // the map is not uniform
  CHECK(same(at(90, 70), style.masked));                       // query 3, key 4: just above the diagonal
}

TEST_CASE("GL: diverging style puts negative values on the red side and zero at white", "[gl][viz]") {
  GlContext gl;
  const HeatmapRenderer renderer;
  const std::vector<float> m = {-0.5f, 0.0f, 0.0f, 0.5f};  // 2×2, not causal
  MapTexture tex;
  tex.upload(pool_map(m.data(), 2, 2, 2, 2, Pooling::Max, false));
  RenderTarget target;
  target.resize(20, 20);
  HeatmapStyle style;
  style.range = {0.5, true};
  renderer.draw(tex, style, target);
  const auto px = target.read_rgb();
  auto at = [&](int x, int y) {
    const size_t o = (static_cast<size_t>(y) * 20 + static_cast<size_t>(x)) * 3;
    return Rgb8{px[o], px[o + 1], px[o + 2]};
  };
  const Rgb8 neg = at(2, 2), zero = at(17, 2), pos = at(17, 17);
  CHECK(neg.r > neg.b + 60);
  CHECK(pos.b > pos.r + 60);
  CHECK(zero.r > 230);
  CHECK(zero.g > 230);
  CHECK(zero.b > 230);
}

#include "viz/export.h"

TEST_CASE("GL: exported map image keeps orientation and exact cells at any size", "[gl][viz][export]") {
  GlContext gl;
  const HeatmapRenderer renderer;
  std::vector<float> m(9, 0.0f);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j <= i; ++j) m[static_cast<size_t>(i * 3 + j)] = 1.0f / static_cast<float>(i + 1);
  HeatmapStyle style;
  style.range = {1.0, false};
  const auto rgb = render_map(renderer, {m.data(), 3, 3, 1, true}, 300, Pooling::Max, style);
  REQUIRE(rgb.size() == 300u * 300u * 3u);
  auto at = [&](int x, int y) {
    const size_t o = (static_cast<size_t>(y) * 300 + static_cast<size_t>(x)) * 3;
    return Rgb8{rgb[o], rgb[o + 1], rgb[o + 2]};
  };
  CHECK(at(290, 5).r == style.masked.r);                       // top right: future
  CHECK(at(5, 5).g == sequential_colormap().at(1.0).g);        // query 0, key 0
  CHECK(at(5, 295).g == sequential_colormap().at(1.0 / 3).g);  // query 2, key 0
  CHECK(at(99, 295).g == at(0, 295).g);                        // one cell = a 100-pixel block
  difflens::test::ScratchDir dir("png");
  write_png(dir / "m.png", rgb, 300, 300);
  CHECK(std::filesystem::file_size(dir / "m.png") > 100);
  CHECK_THROWS_WITH(render_map(renderer, {m.data(), 3, 3, 1, true}, 4, Pooling::Max, style),
                    Catch::Contains("between 8 and 16384"));
}
