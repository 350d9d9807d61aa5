// halo._C: the C++ side of the Python package (python/halo). The package's
// Python code gives it vLLM's shapes (LLM, SamplingParams, RequestOutput,
// AsyncLLMEngine); this module gives the engine, its tokenizer and the
// command line.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "cli.h"
#include "py_engine.h"
#include "text/tokenizer/tokenizer.h"

namespace py = pybind11;
using halo::python::PyEngine;
using halo::python::PyStream;

namespace halo::python {

void bind_tokenizer(py::module_& m) {
  using text::Tokenizer;
  py::class_<Tokenizer>(m, "Tokenizer", "The model's tokenizer (tokenizer.json, or a GGUF file's)")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            return t.encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_token_id)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_token_id)
      .def_property_readonly("eos_token", &Tokenizer::eos_token)
      .def_property_readonly("bos_token", &Tokenizer::bos_token)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("__len__", &Tokenizer::vocab_size)
      .def_property_readonly("added_tokens_decoder",
                             [](const Tokenizer& t) {
                               py::dict d;
                               for (int32_t id = 0; id < t.vocab_size(); ++id)
                                 if (t.is_added_token(id)) d[py::int_(id)] = t.id_to_token(id);
                               return d;
                             })
      .def("special_token_ids",
           [](const Tokenizer& t) {
             std::vector<int32_t> ids;
             for (int32_t id = 0; id < t.vocab_size(); ++id)
               if (t.is_special(id)) ids.push_back(id);
             return ids;
           })
      .def("convert_tokens_to_ids",
           [](const Tokenizer& t, const py::object& tokens) -> py::object {
             auto one = [&](const std::string& s) -> py::object {
               auto id = t.token_to_id(s);
               return id ? py::object(py::int_(*id)) : py::object(py::none());
             };
             if (py::isinstance<py::str>(tokens)) return one(tokens.cast<std::string>());
             py::list out;
             for (const auto& s : tokens.cast<std::vector<std::string>>()) out.append(one(s));
             return out;
           })
      .def("convert_ids_to_tokens", [](const Tokenizer& t, const py::object& ids) -> py::object {
        auto one = [&](int32_t id) -> std::string {
          try {
            return t.id_to_token(id);
          } catch (const std::exception& e) {
            throw py::value_error(e.what());
          }
        };
        if (py::isinstance<py::int_>(ids)) return py::str(one(ids.cast<int32_t>()));
        py::list out;
        for (int32_t id : ids.cast<std::vector<int32_t>>()) out.append(one(id));
        return out;
      });
}

void bind_engine(py::module_& m) {
  py::class_<PyStream, std::shared_ptr<PyStream>>(m, "Stream", "One request's events")
      .def_property_readonly("request_id", &PyStream::request_id)
      .def_property_readonly("prompt_ids", &PyStream::prompt_ids)
      .def("poll", &PyStream::poll, "Every event waiting, as dicts; never blocks")
      .def_property_readonly("ended", &PyStream::ended)
      .def("prompt_logprobs", &PyStream::prompt_logprobs)
      .def_property_readonly("num_cached_tokens", &PyStream::num_cached_tokens);

  py::class_<PyEngine>(m, "Engine", "A model loaded on a device, with its engine loop running")
      .def(py::init<const std::string&, const std::vector<std::pair<std::string, std::string>>&,
                    const std::string&>(),
           py::arg("model"), py::arg("settings"), py::arg("source") = "LLM",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("model_dir", [](const PyEngine& e) { return e.model().root; })
      .def_property_readonly("device", &PyEngine::device)
      .def_property_readonly("max_model_len",
                             [](const PyEngine& e) { return e.model().max_model_len; })
      .def_property_readonly("vocab_size", [](const PyEngine& e) { return e.model().vocab_size; })
      .def_property_readonly("max_num_seqs",
                             [](const PyEngine& e) { return e.model().max_num_seqs; })
      .def_property_readonly("has_chat_template",
                             [](const PyEngine& e) { return e.model().chat_template.has_value(); })
      .def_property_readonly("generation_defaults",
                             [](const PyEngine& e) {
                               // The model's generation_config.json as the engine read it
                               // (vLLM's names); only the keys it sets.
                               const auto& g = e.model().defaults.generation;
                               py::dict d;
                               if (g.do_sample && !*g.do_sample)
                                 d["temperature"] = 0.0f;
                               else if (g.temperature)
                                 d["temperature"] = *g.temperature;
                               if (g.top_p) d["top_p"] = *g.top_p;
                               if (g.top_k) d["top_k"] = *g.top_k;
                               if (g.repetition_penalty)
                                 d["repetition_penalty"] = *g.repetition_penalty;
                               if (g.max_new_tokens) d["max_tokens"] = *g.max_new_tokens;
                               return d;
                             })
      .def("tokenizer", [](const PyEngine& e) { return e.model().tokenizer(); })
      .def(
          "render_chat",
          [](const PyEngine& e, const std::string& messages, bool add_generation_prompt,
             const std::optional<std::string>& chat_template,
             const std::optional<std::string>& tools, const std::optional<std::string>& kwargs,
             bool continue_final_message) {
            return e.render_chat(
                messages, add_generation_prompt, chat_template ? &*chat_template : nullptr,
                tools ? &*tools : nullptr, kwargs ? &*kwargs : nullptr, continue_final_message);
          },
          py::arg("messages_json"), py::arg("add_generation_prompt") = true,
          py::arg("chat_template") = py::none(), py::arg("tools_json") = py::none(),
          py::arg("chat_template_kwargs_json") = py::none(),
          py::arg("continue_final_message") = false)
      .def("chat_prompt_ids", &PyEngine::chat_prompt_ids, py::arg("rendered"),
           py::arg("add_special_tokens") = false)
      .def("add_request", &PyEngine::add_request, py::arg("request_id"), py::arg("prompt_ids"),
           py::arg("params_json"))
      .def("abort", &PyEngine::abort, py::arg("request_id"))
      .def("notify_fd", &PyEngine::notify_fd)
      .def("take_ready", &PyEngine::take_ready)
      .def("generate", &PyEngine::generate, py::arg("requests"), py::arg("progress") = py::none())
      .def("metrics", &PyEngine::metrics);
}

}  // namespace halo::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "halo's engine, tokenizer and command line (the C++ side of the halo package)";
  m.attr("__version__") = HALO_VERSION;
  halo::tools::install_logger();  // logs on stderr, as the binary's
  m.def(
      "run_cli", [](const std::vector<std::string>& argv) { return halo::tools::run_cli(argv); },
      py::arg("argv"), py::call_guard<py::gil_scoped_release>(),
      "Runs the halo command line (argv without the program name); returns its exit code");
  m.def("set_default_model_dir", &halo::tools::set_default_model_dir, py::arg("path"));
  halo::python::bind_tokenizer(m);
  halo::python::bind_engine(m);
}
