// Map textures, offscreen targets and the heatmap shader program.
#include "viz/heatmap_renderer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "viz/shaders.h"

namespace difflens::viz {
namespace {

GLuint compile(GLenum type, const char* source, const char* name) {
  const GLuint s = glCreateShader(type);
  glShaderSource(s, 1, &source, nullptr);
  glCompileShader(s);
  GLint ok = 0;
  glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
  if (!ok) {
    char log[2048];
    glGetShaderInfoLog(s, sizeof log, nullptr, log);
    glDeleteShader(s);
    throw std::runtime_error(std::string("shader ") + name + " failed to compile: " + log);
  }
  return s;
}

GLuint colormap_texture(const Colormap& c) {
  GLuint t = 0;
  glGenTextures(1, &t);
  glBindTexture(GL_TEXTURE_2D, t);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGB8, Colormap::kEntries, 1, 0, GL_RGB, GL_UNSIGNED_BYTE, c.rgb.data());
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  return t;
}

}  // namespace

MapTexture::MapTexture() {
  glGenTextures(1, &id_);
}
MapTexture::~MapTexture() {
  glDeleteTextures(1, &id_);
}

void MapTexture::upload(const PooledMap& map) {
  glBindTexture(GL_TEXTURE_2D, id_);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  // Texture row 0 = query row 0; the vertex shader maps it to the top of the target.
  glTexImage2D(GL_TEXTURE_2D, 0, GL_R32F, static_cast<GLsizei>(map.cols), static_cast<GLsizei>(map.rows), 0,
               GL_RED, GL_FLOAT, map.values.data());
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);  // pooled to ≤ display size already
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  rows_ = map.rows;
  cols_ = map.cols;
}

RenderTarget::~RenderTarget() {
  if (fbo_) glDeleteFramebuffers(1, &fbo_);
  if (texture_) glDeleteTextures(1, &texture_);
}

void RenderTarget::resize(int width, int height) {
  if (width == width_ && height == height_ && fbo_) return;
  if (!fbo_) {
    glGenFramebuffers(1, &fbo_);
    glGenTextures(1, &texture_);
  }
  width_ = std::max(1, width);
  height_ = std::max(1, height);
  glBindTexture(GL_TEXTURE_2D, texture_);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, width_, height_, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, texture_, 0);
  if (glCheckFramebufferStatus(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE)
    throw std::runtime_error("offscreen framebuffer is incomplete");
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
}

std::vector<uint8_t> RenderTarget::read_rgb() const {
  std::vector<uint8_t> bottom_up(static_cast<size_t>(width_) * height_ * 3);
  glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width_, height_, GL_RGB, GL_UNSIGNED_BYTE, bottom_up.data());
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
  std::vector<uint8_t> top_down(bottom_up.size());
  const size_t stride = static_cast<size_t>(width_) * 3;
  for (int y = 0; y < height_; ++y)
    std::copy_n(bottom_up.data() + static_cast<size_t>(height_ - 1 - y) * stride, stride,
                top_down.data() + static_cast<size_t>(y) * stride);
  return top_down;
}

HeatmapRenderer::HeatmapRenderer() {
  const GLuint vs = compile(GL_VERTEX_SHADER, shaders::heatmap_vert, "heatmap.vert");
  const GLuint fs = compile(GL_FRAGMENT_SHADER, shaders::heatmap_frag, "heatmap.frag");
  program_ = glCreateProgram();
  glAttachShader(program_, vs);
  glAttachShader(program_, fs);
  glLinkProgram(program_);
  glDeleteShader(vs);
  glDeleteShader(fs);
  GLint ok = 0;
  glGetProgramiv(program_, GL_LINK_STATUS, &ok);
  if (!ok) {
    char log[2048];
    glGetProgramInfoLog(program_, sizeof log, nullptr, log);
    throw std::runtime_error(std::string("heatmap shader program failed to link: ") + log);
  }
  glGenVertexArrays(1, &vao_);  // core profile: a bound VAO is required even without attributes
  sequential_ = colormap_texture(sequential_colormap());
  diverging_ = colormap_texture(diverging_colormap());
}

HeatmapRenderer::~HeatmapRenderer() {
  glDeleteProgram(program_);
  glDeleteVertexArrays(1, &vao_);
  glDeleteTextures(1, &sequential_);
  glDeleteTextures(1, &diverging_);
}

void HeatmapRenderer::draw(const MapTexture& map, const HeatmapStyle& style, RenderTarget& target) const {
  glBindFramebuffer(GL_FRAMEBUFFER, target.framebuffer());
  glViewport(0, 0, target.width(), target.height());
  glDisable(GL_BLEND);
  glDisable(GL_SCISSOR_TEST);
  glUseProgram(program_);
  glActiveTexture(GL_TEXTURE0);
  glBindTexture(GL_TEXTURE_2D, map.id());
  glActiveTexture(GL_TEXTURE1);
  glBindTexture(GL_TEXTURE_2D, style.range.diverging ? diverging_ : sequential_);
  glUniform1i(glGetUniformLocation(program_, "map"), 0);
  glUniform1i(glGetUniformLocation(program_, "colormap"), 1);
  glUniform1f(glGetUniformLocation(program_, "hi"), static_cast<float>(style.range.hi));
  glUniform1i(glGetUniformLocation(program_, "scale_mode"), static_cast<int>(style.scale));
  glUniform1i(glGetUniformLocation(program_, "diverging"), style.range.diverging ? 1 : 0);
  glUniform1f(glGetUniformLocation(program_, "log_decades"), static_cast<float>(kLogDecades));
  glUniform3f(glGetUniformLocation(program_, "masked_color"), style.masked.r / 255.0f,
              style.masked.g / 255.0f, style.masked.b / 255.0f);
  glBindVertexArray(vao_);
  glDrawArrays(GL_TRIANGLE_STRIP, 0, 4);
  glBindVertexArray(0);
  glActiveTexture(GL_TEXTURE0);
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
}

}  // namespace difflens::viz
