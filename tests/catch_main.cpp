// Catch2 main for the DiffLens test binaries.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
