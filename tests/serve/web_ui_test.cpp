// The web page's files as halo serve hands them out (core/serve/web_ui.h):
// the built-in copy equals ui/ byte for byte, names cannot climb out of the
// directory, and --ui-dir reads the files per request.
#include "serve/web_ui.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fs = std::filesystem;
using halo::serve::HttpRequest;
using halo::serve::WebUi;

namespace {

HttpRequest get(std::string path, std::string method = "GET") {
  HttpRequest r;
  r.method = std::move(method);
  r.path = path;
  r.target = std::move(path);
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string header(const halo::serve::HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

}  // namespace

TEST(WebUi, BuiltInCopyIsTheSourceDirectoryByteForByte) {
  const WebUi ui;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(HALO_UI_SOURCE_DIR)) {
    const std::string name = entry.path().filename().string();
    auto r = ui.answer(get("/ui/" + name));
    ASSERT_EQ(r.status, 200) << name;
    EXPECT_EQ(r.body, slurp(entry.path())) << name;
    ++files;
  }
  EXPECT_EQ(files, halo::serve::embedded_web_assets().size());
  auto index = ui.answer(get("/"));
  ASSERT_EQ(index.status, 200);
  EXPECT_EQ(index.body, slurp(fs::path(HALO_UI_SOURCE_DIR) / "index.html"));
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  // The page may talk to this server only.
  EXPECT_NE(header(index, "Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(header(index, "X-Content-Type-Options"), "nosniff");
}

TEST(WebUi, ContentTypesFollowTheExtension) {
  const WebUi ui;
  for (const auto& a : halo::serve::embedded_web_assets()) {
    auto r = ui.answer(get("/ui/" + std::string(a.name)));
    if (a.name.ends_with(".js")) {
      EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8") << a.name;
    } else if (a.name.ends_with(".css")) {
      EXPECT_EQ(r.content_type, "text/css; charset=utf-8") << a.name;
    }
  }
}

TEST(WebUi, NamesCannotLeaveTheDirectory) {
  // The directory's parent holds files (the repository's CMakeLists.txt):
  // none of them may be reached, nor hidden files or subdirectories.
  const WebUi disk(HALO_UI_SOURCE_DIR);
  const WebUi built_in;
  for (const char* path :
       {"/ui/../CMakeLists.txt", "/ui/..", "/ui/", "/ui/.hidden", "/ui/%2e%2e/CMakeLists.txt",
        "/ui/a/b.js", "/ui/no-such-file.js", "/ui/index.html\\..\\x"}) {
    EXPECT_EQ(disk.answer(get(path)).status, 404) << path;
    EXPECT_EQ(built_in.answer(get(path)).status, 404) << path;
  }
}

TEST(WebUi, OnlyGet) {
  auto r = WebUi().answer(get("/", "POST"));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(header(r, "Allow"), "GET");
}

TEST(WebUi, DirectoryIsReadPerRequest) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("halo-web-ui-" + std::to_string(::getpid()));  // unique among running processes
  fs::create_directories(dir);
  const WebUi ui(dir);
  std::ofstream(dir / "index.html") << "one";
  EXPECT_EQ(ui.answer(get("/")).body, "one");
  std::ofstream(dir / "index.html") << "two";
  EXPECT_EQ(ui.answer(get("/")).body, "two");
  fs::remove_all(dir);
}

TEST(WebUi, OwnsTheRootAndUiPathsOnly) {
  EXPECT_TRUE(WebUi::owns("/"));
  EXPECT_TRUE(WebUi::owns("/ui/app.js"));
  EXPECT_FALSE(WebUi::owns("/v1/models"));
  EXPECT_FALSE(WebUi::owns("/uix"));
  EXPECT_FALSE(WebUi::owns("/metrics"));
}
