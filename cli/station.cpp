// knot station — a fat layer station (core/net/fat_station.h) served over HTTP and
// WebSocket (core/net/station_server.h). Prints "knot station listening on
// http://HOST:PORT" on stdout once listening; SIGTERM / SIGINT exit 0.
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "infer/options.h"
#include "infer/planner.h"
#include "net/fat_station.h"
#include "net/http_source.h"
#include "net/station_server.h"

namespace {

// "A..B" -> [A, B)
std::pair<int, int> parse_layers(const std::string& s) {
  const size_t dots = s.find("..");
  if (dots == std::string::npos) knot::usage_fail("--layers must be A..B (layers [A, B)), got " + s);
  const int a = (int)knot::parse_int_option("--layers", s.substr(0, dots), 0, 1 << 20);
  const int b = (int)knot::parse_int_option("--layers", s.substr(dots + 2), 1, 1 << 20);
  if (b <= a) knot::usage_fail("--layers " + s + ": B must be greater than A (layers [A, B))");
  return {a, b};
}

std::pair<int, int> parse_slice(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) knot::usage_fail("--slice must be i/n, got " + s);
  const int n = (int)knot::parse_int_option("--slice", s.substr(slash + 1), 1, 1 << 16);
  const int i = (int)knot::parse_int_option("--slice", s.substr(0, slash), 0, n - 1);
  return {i, n};
}

}  // namespace

int cmd_station(int argc, char** argv) {
  int exit_code = 0;
  const nlohmann::json cl = parse_cli_or_usage("station", argc, argv, &exit_code);
  if (cl.is_null()) return exit_code;
  const nlohmann::json& cli = cl["cli"];
  if (!cli.contains("layers")) knot::usage_fail("station: --layers A..B is required");
  knot::net::FatStationConfig cfg;
  cfg.model = cl["args"][0];
  std::tie(cfg.l0, cfg.l1) = parse_layers(cli["layers"]);
  if (cli.contains("slice")) std::tie(cfg.slice_i, cfg.slice_n) = parse_slice(cli["slice"]);
  cfg.name = cli.value("name", "");
  cfg.reference = cli.value("reference", false);
  if (cli.contains("kv_budget")) cfg.kv_budget = knot::parse_bytes(cli["kv_budget"].get<std::string>(), "--kv-budget");
  const std::string host = cli.value("host", "127.0.0.1");
  const int port = cli.value("port", 0);

  // SIGTERM / SIGINT go to one thread that exits the process (connection threads are detached)
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }).detach();

  auto src = knot::net::open_model_source(cfg.model);
  const std::string role = cli.value("role", "");
  cfg.role = role.empty() ? "mid" : role;
  knot::net::FatStation st(cfg, std::move(src));
  if (role.empty()) {
    // entry when A is 0, exit when B is n_layer (a one-station mesh is its exit)
    cfg.role = cfg.l1 == st.config().n_layer ? "exit" : cfg.l0 == 0 ? "entry" : "mid";
    st.set_role(cfg.role);
  }
  knot::net::serve(st, host, port, [&](int p) {
    std::fprintf(stdout, "knot station listening on http://%s:%d\n", host.c_str(), p);
    std::fflush(stdout);
  });
  return 0;
}
