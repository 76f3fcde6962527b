# Turns shaders/*.vert|frag into a C++ header of raw string literals at configure time (embed_text.cmake);
# CMake re-runs when a shader changes, so the binary always carries the current source.
include(${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake)
function(difflens_embed_shaders out_header)
  file(GLOB shaders ${PROJECT_SOURCE_DIR}/shaders/*.vert ${PROJECT_SOURCE_DIR}/shaders/*.frag)
  difflens_embed_text(${out_header} difflens::viz::shaders ${shaders})
endfunction()
