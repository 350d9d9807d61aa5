#pragma once
// TemplateError: everything the Jinja engine throws (syntax errors, unknown
// filters, undefined calls, raise_exception(), resource limits). what() names
// the template line; message() is the bare message (for raise_exception the
// template author's text, suitable for an HTTP 400 body).
#include <string>

#include "common/error.h"

namespace halo::text::jinja {

class TemplateError : public halo::Error {
 public:
  TemplateError(int line, std::string message, bool raised_by_template = false)
      : halo::Error(line > 0 ? "chat template line " + std::to_string(line) + ": " + message
                             : "chat template: " + message),
        line_(line),
        message_(std::move(message)),
        raised_(raised_by_template) {}

  int line() const noexcept { return line_; }
  const std::string& message() const noexcept { return message_; }
  // True when the template itself called raise_exception(message).
  bool raised_by_template() const noexcept { return raised_; }

 private:
  int line_;
  std::string message_;
  bool raised_;
};

}  // namespace halo::text::jinja
