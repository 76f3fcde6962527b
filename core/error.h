// Typed errors thrown by core. Messages are meant for users: they name the file, the tensor or the
// field and say what was expected. The app and CLI catch `difflens::Error` at their edge.
#pragma once

#include <stdexcept>
#include <string>

namespace difflens {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file (checkpoint, safetensors, trace bundle) is malformed or does not match its config.
class FormatError : public Error {
 public:
  using Error::Error;
};

// config.json is missing a field, has a wrong type, or is inconsistent.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A long-running job (capture, training) was cancelled through its cancel flag.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

}  // namespace difflens
