#pragma once
// tests/hub/fake_hub.py as a child process: a stand-in of the Hugging Face
// Hub on a real local socket, for tests of model/hf_hub.h.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../model/test_util.h"
#include "model/hf_hub.h"

namespace halo::model::testing {

// Hub options that read only `cache` and `home` (never the developer's own
// cache or token) and `env`, with 2 retries and no progress bar.
inline HubOptions isolated_hub_options(const fs::path& cache, const fs::path& home,
                                       std::map<std::string, std::string> env = {}) {
  HubOptions o;
  o.progress = false;
  env.emplace("HF_HUB_CACHE", cache.string());
  env.emplace("HOME", home.string());
  env.emplace("HALO_HUB_RETRIES", "2");
  o.env = std::move(env);
  return o;
}

// Serves the repos under `root` (ROOT/ORG/NAME/<files>); its request log is
// root's sibling hub.log. The first stdout line of fake_hub.py is its port.
class FakeHubProcess {
 public:
  FakeHubProcess(const fs::path& root, const std::vector<std::string>& extra)
      : log_(root.parent_path() / "hub.log") {
    fs::remove(log_);
    std::vector<std::string> args = {HALO_PYTHON_EXE, HALO_FAKE_HUB, root.string(), "--log",
                                     log_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    port_ = read_port(fds[0]);
    ::close(fds[0]);
  }
  ~FakeHubProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  FakeHubProcess(const FakeHubProcess&) = delete;
  FakeHubProcess& operator=(const FakeHubProcess&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // One JSON object per request the hub served.
  std::vector<json> requests() const {
    std::vector<json> out;
    std::istringstream in(read_file(log_));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  // requests() once the log has settled: fake_hub.py logs a request after
  // answering it, so the client can be a line ahead of the log. Waits (at
  // most 5 s) for `at_least` lines, then until no line came for 200 ms.
  std::vector<json> settled_requests(size_t at_least = 0) const {
    std::vector<json> now = requests();
    for (int i = 0; i < 50 && now.size() < at_least; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = requests();
    }
    for (int i = 0; i < 25; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::vector<json> later = requests();
      if (later.size() == now.size()) break;
      now = std::move(later);
    }
    return now;
  }

 private:
  static int read_port(int fd) {
    std::string line;
    char c;
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 10000) > 0 && ::read(fd, &c, 1) == 1 && c != '\n') line += c;
    if (line.empty()) throw std::runtime_error("fake_hub.py printed no port");
    return std::stoi(line);
  }
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace halo::model::testing
