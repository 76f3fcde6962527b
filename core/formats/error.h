// Typed errors thrown by core. Messages are meant for users: they name the file, the tensor or the
// field and say what was expected. The app and CLI catch `difflens::Error` at their edge.
#pragma once

#include <exception>
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

// What to show a user for any exception: its message without the C++ backtrace that LibTorch's c10::Error
// appends ("Exception raised from ... (most recent call first):" and its frames).
inline std::string user_message(const std::exception& e) {
  std::string m = e.what();
  const size_t at = m.find("Exception raised from ");
  if (at != std::string::npos) m.erase(at);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m.empty() ? std::string("LibTorch error without a message") : m;
}

}  // namespace difflens
