# Run at build time (cmake -P): writes OUT, a header with DiffLens's version (project() in the top-level
# CMakeLists.txt, passed as VERSION) and the git commit the sources are at, rewritten only when it changes
# so that a build at the same commit recompiles nothing. Outside a git checkout the commit is "".
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(commit "")
endif()
set(dirty 0)
if(commit)
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(changes)
    set(dirty 1)
  endif()
endif()
set(text "// Written by cmake/version.cmake at build time.\n#define DIFFLENS_VERSION \"${VERSION}\"\n#define DIFFLENS_GIT_COMMIT \"${commit}\"\n#define DIFFLENS_GIT_DIRTY ${dirty}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
