#version 330 core
// Colormaps one attention map. `map` holds pooled values (R32F, NaN = masked future) sampled with
// GL_NEAREST at display size; `colormap` is a 256-entry RGB ramp. Value scaling mirrors
// viz/map_view.cpp colormap_coordinate(): linear, sqrt or log (kLogDecades below hi); diverging maps
// put 0 at the ramp's centre.
in vec2 uv;
out vec4 color;
uniform sampler2D map;
uniform sampler2D colormap;
uniform float hi;
uniform int scale_mode;   // 0 linear, 1 sqrt, 2 log
uniform int diverging;    // 0 or 1
uniform vec3 masked_color;
uniform float log_decades;

void main() {
  float v = texture(map, uv).r;
  if (isnan(v)) {
    color = vec4(masked_color, 1.0);
    return;
  }
  float x = min(abs(v) / hi, 1.0);
  float f = x;
  if (scale_mode == 1) f = sqrt(x);
  if (scale_mode == 2) f = x <= 0.0 ? 0.0 : max(0.0, (log(x) / log(10.0) + log_decades) / log_decades);
  float t = diverging == 1 ? 0.5 + sign(v) * 0.5 * f : (v < 0.0 ? 0.0 : f);
  // Sample the ramp at entry centres so t = 0 and t = 1 hit the end colours exactly.
  color = vec4(texture(colormap, vec2((t * 255.0 + 0.5) / 256.0, 0.5)).rgb, 1.0);
}
