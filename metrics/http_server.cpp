#include "metrics/http_server.h"

#include <CivetServer.h>

#include <functional>
#include <mutex>
#include <sstream>
#include <string_view>

#include "trace/records.h"
#include "common/json.h"
#include "metrics/otlp/wire.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::metrics {
namespace {

void reply(mg_connection* conn, int status, const char* type, const std::string& body,
           bool gzip = false) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            status, status == 200 ? "OK" : "Service Unavailable", type, body.size(),
            gzip ? "Content-Encoding: gzip\r\n" : "");
  mg_write(conn, body.data(), body.size());
}

bool accepts_gzip(mg_connection* conn) {
  const char* h = mg_get_header(conn, "Accept-Encoding");
  return h && std::string_view(h).find("gzip") != std::string_view::npos;
}

// The exposition of the latest snapshot, rendered once however many scrapers ask (an HA pair
// of Prometheus servers, a person with curl) and gzip'd once for those that accept it. A
// scrape that finds a newer snapshot renders it; concurrent scrapes of the same one wait for
// that render instead of repeating it. Once gzip'd, the plain text is let go (Prometheus always
// asks for gzip, and the text is ~60x larger); a plain request after that renders it again.
class ExpositionCache {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  Bytes get(const std::shared_ptr<const Snapshot>& snap, const BuildInfo& build, bool gzip) {
    std::lock_guard lock(mu_);
    if (snapshot_ != snap) {
      snapshot_ = snap;  // kept, so its address is never reused while it is the key
      text_.reset();
      gzip_.reset();
    }
    if (gzip && gzip_) return gzip_;
    if (!text_) text_ = std::make_shared<const std::string>(render_exposition(*snap, build));
    if (!gzip) return text_;
    gzip_ = std::make_shared<const std::string>(otlp::gzip_compress(*text_, 1));
    text_.reset();  // a reply still writing it holds its own reference
    return gzip_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<const Snapshot> snapshot_;
  Bytes text_, gzip_;
};


class Handler : public CivetHandler {
 public:
  using Fn = std::function<void(mg_connection*)>;
  explicit Handler(Fn fn) : fn_(std::move(fn)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    fn_(conn);
    return true;
  }

 private:
  Fn fn_;
};

}  // namespace

struct HttpServer::Handlers {
  Handler metrics, healthz, debug;
};

// The host evidence of a series (issue 4): what explains a memory, I/O, network or NCCL chain,
// by process where the snapshot has it.
static void host_json(std::ostringstream& o, const Series& s) {
  auto calls = trace::all_calls();
  o << ",\"starvation_ratio\":" << json_number(s.starvation_ratio) << ",\"reclaim\":{\"direct_ns\":"
    << s.reclaim.direct_ns << ",\"direct_count\":" << s.reclaim.direct_count
    << ",\"memcg_ns\":" << s.reclaim.memcg_ns << ",\"memcg_count\":" << s.reclaim.memcg_count
    << ",\"cuda_ns\":" << s.reclaim.cuda_ns << "},\"oom_kills\":" << s.oom_kills
    << ",\"oom_kills_cuda\":" << s.oom_kills_cuda << ",\"oom_victims\":[";
  for (size_t i = 0; i < s.oom_victims.size(); ++i) {
    const OomKill& k = s.oom_victims[i];
    o << (i ? "," : "") << "{\"pid\":" << k.pid << ",\"comm\":" << json_string(k.comm)
      << ",\"cuda\":" << (k.cuda ? "true" : "false") << ",\"at_ns\":" << k.at_ns << "}";
  }
  o << "],\"tcp_retransmits\":{\"ipv4\":" << s.tcp_retransmits_ipv4
    << ",\"ipv6\":" << s.tcp_retransmits_ipv6 << "},\"io_processes\":[";
  for (size_t i = 0; i < s.io_processes.size(); ++i) {
    const ProcessIo& p = s.io_processes[i];
    o << (i ? "," : "") << "{\"pid\":" << p.pid << ",\"comm\":" << json_string(p.comm)
      << ",\"device\":" << json_string(p.key.device) << ",\"op\":" << json_string(p.key.op)
      << ",\"count\":" << p.totals.count << ",\"bytes\":" << p.totals.bytes
      << ",\"sum_ns\":" << p.totals.sum_ns << "}";
  }
  o << "],\"nccl_processes\":[";
  bool first = true;
  for (const ProcessNccl& p : s.nccl_processes) {
    if (p.key.call_id >= calls.size()) continue;
    o << (first ? "" : ",") << "{\"pid\":" << p.pid
      << ",\"op\":" << json_string(calls[p.key.call_id].name) << ",\"rank\":" << p.key.rank
      << ",\"world_size\":" << p.key.world_size << ",\"count\":" << p.totals.count
      << ",\"bytes\":" << p.totals.bytes << ",\"sum_ns\":" << p.totals.sum_ns << "}";
    first = false;
  }
  o << "]";
}

std::string snapshot_json(const Snapshot& snap) {
  auto calls = trace::all_calls();
  std::ostringstream o;
  o << "{\"sequence\":" << snap.sequence << ",\"ready\":" << (snap.ready ? "true" : "false")
    << ",\"traced_processes\":" << snap.traced_processes
    << ",\"attached_libraries\":" << snap.attached_libraries
    << ",\"attached_probes\":" << snap.attached_probes << ",\"outliers\":" << snap.outliers
    << ",\"lost\":{";
  for (unsigned i = 0; i < trace::kLostSources; ++i) {
    o << (i ? "," : "") << json_string(trace::lost_source_name(i)) << ":" << snap.lost[i];
  }
  o << "},\"series\":[";
  bool first = true;
  for (const auto& [label, s] : snap.series) {
    o << (first ? "" : ",") << "{\"cgroup\":" << json_string(label)
      << ",\"container_id\":" << json_string(s.identity.container_id)
      << ",\"offcpu\":{\"runnable_ns\":" << s.offcpu.runnable_ns
      << ",\"blocked_ns\":" << s.offcpu.blocked_ns << ",\"oncpu_ns\":" << s.offcpu.oncpu_ns
      << ",\"preemptions\":" << s.offcpu.preemptions
      << ",\"runnable_ratio\":" << json_number(s.runnable_ratio)
      << ",\"blocked_ratio\":" << json_number(s.blocked_ratio) << "},\"calls\":[";
    first = false;
    bool fc = true;
    for (const auto& [id, t] : s.calls) {
      if (id >= calls.size()) continue;
      o << (fc ? "" : ",") << "{\"call\":" << json_string(calls[id].name)
        << ",\"api\":" << json_string(trace::api_name(calls[id].api)) << ",\"count\":" << t.count
        << ",\"sum_ns\":" << t.sum_ns << ",\"runnable_ns\":" << t.runnable_ns
        << ",\"blocked_ns\":" << t.blocked_ns << ",\"max_ns\":" << t.max_ns
        << ",\"p50_s\":" << json_number(trace::quantile_upper_seconds(t.buckets, 0.5))
        << ",\"p99_s\":" << json_number(trace::quantile_upper_seconds(t.buckets, 0.99)) << "}";
      fc = false;
    }
    o << "],\"processes\":[";
    fc = true;
    for (const auto& p : s.processes) {
      if (p.call_id >= calls.size()) continue;
      o << (fc ? "" : ",") << "{\"pid\":" << p.pid << ",\"call\":" << json_string(calls[p.call_id].name)
        << ",\"count\":" << p.totals.count << ",\"runnable_ns\":" << p.totals.runnable_ns << "}";
      fc = false;
    }
    o << "],\"preemptors\":[";
    fc = true;
    for (const auto& p : s.preemptors) {
      o << (fc ? "" : ",") << "{\"pid\":" << p.pid << ",\"comm\":" << json_string(p.comm)
        << ",\"cgroup\":" << json_string(p.cgroup) << ",\"victim_pid\":" << p.victim_pid
        << ",\"runnable_ns\":" << p.runnable_ns << ",\"count\":" << p.count << "}";
      fc = false;
    }
    o << "]";
    host_json(o, s);
    o << "}";
  }
  o << "]}\n";
  return o.str();
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      const SnapshotBoard& board,
                                                      BuildInfo build) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handlers_ = std::make_unique<Handlers>(Handlers{
      Handler([&board, build, cache = std::make_shared<ExpositionCache>()](mg_connection* c) {
        const bool gzip = accepts_gzip(c);
        auto body = cache->get(board.current(), build, gzip);
        reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", *body, gzip);
      }),
      Handler([&board](mg_connection* c) {
        auto snap = board.current();
        if (snap->ready) {
          reply(c, 200, "text/plain", "ok\n");
        } else {
          reply(c, 503, "text/plain", "starting: probes not attached yet\n");
        }
      }),
      Handler([&board](mg_connection* c) {
        reply(c, 200, "application/json", snapshot_json(*board.current()));
      })});
  std::vector<std::string> options = {"listening_ports", listen, "num_threads", "2",
                                      "request_timeout_ms", "10000"};
  try {
    s->server_ = std::make_unique<CivetServer>(options);
  } catch (const CivetException& e) {
    return make_error("cannot listen on " + listen + ": " + e.what() +
                      " (is another process using the port? pick one with --listen ADDR:PORT)");
  }
  s->server_->addHandler("/metrics", s->handlers_->metrics);
  s->server_->addHandler("/healthz", s->handlers_->healthz);
  s->server_->addHandler("/debug/snapshot", s->handlers_->debug);
  return s;
}

HttpServer::~HttpServer() {
  if (server_) server_->close();
}

}  // namespace stallwatch::metrics
