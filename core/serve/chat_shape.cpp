#include "serve/chat_shape.h"

namespace halo::serve {

void write_event(std::string& out, const char* type, const ojson& data) {
  out += "event: ";
  out += type;
  out += "\ndata: ";
  out += dump(data);
  out += "\n\n";
}

}  // namespace halo::serve
