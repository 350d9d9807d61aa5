// halo: serve, generate, compile, bench and inspect devices.
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  return halo::tools::run_cli(std::vector<std::string>(argv + 1, argv + argc));
}
