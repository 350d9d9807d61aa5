#pragma once
// The web page of `halo serve` (ui/ in the repository): chat with the served
// models, side by side, with each answer's speed and a live panel of the
// server. It talks to the server's own API (/v1/models, /v1/chat/completions,
// /metrics) from the browser; this class only hands out its files:
//   GET /            ui/index.html
//   GET /ui/NAME     ui/NAME
// from the copy built into the binary (cmake/HaloEmbedFiles.cmake), or from a
// directory on disk (`--ui-dir`, read per request, for working on the page).
// The files are public: the page asks for the API key and keeps it in memory.
//
// Threads: handle() may run on any I/O thread at once; the object is
// immutable after construction.
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "serve/http_server.h"

namespace halo::serve {

struct WebAsset {
  std::string_view name;  // relative to ui/, e.g. "index.html", "app.js"
  std::string_view bytes;
};

// The files of ui/ as built into the binary (a generated source).
std::span<const WebAsset> embedded_web_assets();

class WebUi {
 public:
  // Files from `dir`, or the built-in copy when it is empty.
  explicit WebUi(std::filesystem::path dir = {});

  // Whether `path` is one of the page's: "/" or "/ui/...".
  static bool owns(std::string_view path);
  void handle(const HttpRequest& req, const std::shared_ptr<Responder>& res) const;
  // The response to a request it owns: the file, 404, or 405 for a method other than GET.
  HttpResponse answer(const HttpRequest& req) const;

 private:
  std::optional<std::string> read(std::string_view name) const;  // nullopt: no such file

  std::filesystem::path dir_;
};

}  // namespace halo::serve
