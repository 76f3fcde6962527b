// How many CPU threads a command uses when --threads is not given.
#pragma once

namespace difflens {

// Every core this process may run on (its affinity mask: `taskset -c 0 difflens ...` gives 1), at least 1.
int default_threads();

// Where the launcher's help texts (app/cli/cli.h, launcher_texts_source) leave --threads' default core count
// for the launcher to fill in: a byte no help text holds.
constexpr char kThreadsMark = '\x1e';

}  // namespace difflens
