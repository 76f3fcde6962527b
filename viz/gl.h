// OpenGL 3.3 core entry points, from the system headers (GLVND exports them; no loader library).
#pragma once

#ifndef GL_GLEXT_PROTOTYPES
#define GL_GLEXT_PROTOTYPES 1
#endif
#include <GL/gl.h>
#include <GL/glext.h>
