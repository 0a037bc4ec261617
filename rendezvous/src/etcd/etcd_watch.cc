// A watch over the gateway: POST /v3/watch with a create_request keeps the response open and
// streams one JSON message per line ({"result": ...} or {"error": ...}). The first says the
// watch is created; then events, progress notifications, or a cancellation (with
// compact_revision when the start revision was compacted away).
//
// Lost streams are resumed here rather than reported, because the revision makes it exact: the
// watch is created again on the next member from the revision after the last event delivered,
// so the caller sees every event once, in order, whichever member served it. What the caller
// must act on is thrown: a compaction (events are gone), an answer that is no outage (auth),
// and no member taking the watch back before the deadline.
#include <algorithm>
#include <thread>

#include "ddprun/common/text.h"
#include "etcd/client_impl.h"

namespace ddprun::rendezvous::etcd {
namespace {

// One line of the stream at most (a batch of events is one line): beyond that the stream is
// taken as garbled.
constexpr std::size_t kMaxLineBytes = 64u << 20;

// A silence check is made only with this much of the caller's time left; with less, the watch
// waits on and checks at a later next().
constexpr auto kCheckNeeds = std::chrono::milliseconds(500);
constexpr auto kCheckTimeout = std::chrono::seconds(2);

std::optional<std::string> takeLine(std::string& buffer) {
  for (;;) {
    const auto newline = buffer.find('\n');
    if (newline == std::string::npos) return std::nullopt;
    std::string line = buffer.substr(0, newline);
    buffer.erase(0, newline + 1);
    if (line.find_first_not_of(" \r\t") != std::string::npos) return line;
  }
}

class Watch final : public EtcdWatch {
 public:
  Watch(std::shared_ptr<EtcdClient::Impl> client, WatchRequest request)
      : client_(std::move(client)), request_(std::move(request)), next_(request_.startRevision) {}

  // Creates the watch on the first member that takes it, in rounds like a unary call.
  void open(Deadline deadline, bool resuming) {
    const auto started = Clock::now();
    const std::size_t members = client_->options.endpoints.size();
    // A resumed watch starts at the member after the one it lost (that one is likely down),
    // unless only the stream was in doubt (remakeAfterSilence): then at the one that answered last.
    const std::size_t first =
        resuming && !memberAnswers_ ? (endpoint_ + 1) % members : client_->preferred();
    std::map<std::size_t, std::string> failures;
    std::map<std::size_t, EtcdError::Code> codes;
    for (int round = 0;; ++round) {
      for (std::size_t i = 0; i < members; ++i) {
        const auto now = Clock::now();
        if (now >= deadline) break;
        const std::size_t endpoint = (first + i) % members;
        try {
          openOn(endpoint, attemptEnd(client_->options, now, deadline, members - i));
          if (resuming) ++resumes_;
          return;
        } catch (const TransportError& error) {
          failures[endpoint] = error.what();
          codes[endpoint] =
              error.timedOut() ? EtcdError::Code::kTimeout : EtcdError::Code::kUnreachable;
        } catch (const EtcdError& error) {
          if (!failsOver(error.code())) {
            throw EtcdError(error.code(),
                            "etcd: " + what() + ": " + client_->options.endpoints[endpoint].text() +
                                " " + error.what(),
                            error.grpcCode(), error.compactRevision());
          }
          failures[endpoint] = error.what();
          codes[endpoint] = error.code();
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(roundPause(round), deadline - now));
    }
    std::string doing = what();
    if (resuming) {
      doing += " (resuming from revision " + std::to_string(next_) + " after " + lostBecause_ + ")";
    }
    throw EtcdError(mostTelling(codes),
                    everyMemberFailed(client_->options, doing, failures,
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          Clock::now() - started)));
  }

  std::optional<WatchBatch> next(Deadline deadline) override {
    for (;;) {
      if (!connection_) open(deadline, true);
      if (auto batch = fromBuffer()) return batch;
      if (!connection_) continue;  // the buffer said the stream is lost: resume
      const auto now = Clock::now();
      if (now >= deadline) return std::nullopt;
      const auto remakeAfter = request_.remakeAfterSilence;
      if (remakeAfter.count() > 0 && now >= streamHeard_ + remakeAfter) {
        lost("no message on it for " + std::to_string(remakeAfter.count()) + " ms", true);
        continue;
      }
      const auto silence = request_.checkAfterSilence;
      const auto heard = lastHeard();
      const bool checkDue = silence.count() > 0 && now >= heard + silence;
      if (checkDue && deadline - now >= kCheckNeeds) {
        check(std::min<Deadline>(deadline, now + kCheckTimeout));
        continue;
      }
      Deadline readUntil = deadline;
      if (silence.count() > 0 && !checkDue) readUntil = std::min(deadline, heard + silence);
      if (remakeAfter.count() > 0) readUntil = std::min(readUntil, streamHeard_ + remakeAfter);
      try {
        std::string bytes = connection_->readStream(readUntil);
        if (!bytes.empty()) {
          lastHeard_ = Clock::now();
          streamHeard_ = lastHeard_;
          buffer_ += bytes;
          if (buffer_.size() > kMaxLineBytes) lost("a stream line over 64 MiB");
        }
      } catch (const TransportError& error) {
        lost(error.what());
      }
    }
  }

  Revision nextRevision() const override { return next_; }
  int resumes() const override { return resumes_; }
  std::string endpoint() const override { return client_->options.endpoints[endpoint_].text(); }
  // The client's other answers count: an agent's keep-alives go to the member its watches
  // stream from (the one that answered last), every second or so, and each asks for a leader
  // as the status check does. So a silent stream costs no status request of its own, and a
  // caller that keeps a watch across short waits (etcd_store.cc's WatchKeeper) keeps it rather
  // than replacing it with a read and a new watch (at scale, a large share of etcd's requests:
  // docs/benchmarks.md, "Scale").
  Clock::time_point lastHeard() const override {
    return std::max(lastHeard_, client_->lastAnswer(endpoint_));
  }

 private:
  std::string what() const { return "watch " + rangeText(request_.range); }

  // `memberAnswers`: the member is not in doubt, only this stream.
  void lost(const std::string& why, bool memberAnswers = false) {
    connection_.reset();
    buffer_.clear();
    memberAnswers_ = memberAnswers;
    lostBecause_ = "the stream from " + client_->options.endpoints[endpoint_].text() +
                   " was lost: " + common::printablePrefix(why);
  }

  // The member of a silent stream is asked whether it is there and has a leader; if not, the
  // stream is lost (the member would not send events if it had any).
  void check(Deadline deadline) {
    try {
      client_->call("status", "/maintenance/status", wire::json::object(), deadline,
                    EtcdClient::Impl::Effect::kRead, endpoint_);
      lastHeard_ = Clock::now();
    } catch (const EtcdError& error) {
      lost(std::string("silent, and its member failed a status check: ") + error.what());
    }
  }

  // The next batch from the lines already read, if any. A line that ends the stream (an error,
  // a cancellation, garbage) drops the connection (lost) or throws what the caller must know.
  std::optional<WatchBatch> fromBuffer() {
    while (connection_) {
      auto line = takeLine(buffer_);
      if (!line) return std::nullopt;
      wire::WatchMessage message;
      try {
        message = wire::parseWatchLine(*line);
      } catch (const EtcdError& error) {
        lost(error.what());
        return std::nullopt;
      }
      switch (message.kind) {
        case wire::WatchMessage::Kind::kCreated:
          continue;
        case wire::WatchMessage::Kind::kEvents: {
          // Events carry their revision: the watch goes on after the last. A progress
          // notification moves nothing: etcd's progress notifications were not ordered with
          // the event stream (etcd#15220, fixed by #15237 and #17557 after the Debian 3.4.23
          // this was tested on), so one could name a revision whose events were still to
          // come, and resuming after it would skip them. Resuming from the last event costs at
          // most a compaction report after a long quiet time.
          for (const WatchEvent& event : message.events) {
            next_ = std::max(next_, event.kv.modRevision + 1);
          }
          return WatchBatch{message.header, std::move(message.events)};
        }
        case wire::WatchMessage::Kind::kCanceled:
          if (message.compactRevision != 0) {
            const Revision from = next_;
            connection_.reset();
            buffer_.clear();
            throw EtcdError(EtcdError::Code::kCompacted,
                            "etcd: " + what() + ": revision " + std::to_string(from) +
                                " was compacted (the oldest kept is " +
                                std::to_string(message.compactRevision) +
                                "): read the keys again and watch from the revision read",
                            11, message.compactRevision);
          }
          lost("etcd canceled the watch: '" + common::printablePrefix(message.cancelReason) + "'");
          return std::nullopt;
        case wire::WatchMessage::Kind::kError: {
          const EtcdError::Code code = wire::codeForGrpc(message.error.grpcCode);
          const std::string said = "etcd said '" + common::printablePrefix(message.error.message) +
                                   "' (gRPC " + std::to_string(message.error.grpcCode) + ")";
          // An outage (no leader: etcd ends every hasleader stream of a member that lost its
          // leader) or a token that lapsed (renewed when the watch is made again) is resumed.
          if (failsOver(code) || message.error.grpcCode == 16) {
            lost(said);
            return std::nullopt;
          }
          connection_.reset();
          buffer_.clear();
          throw EtcdError(code, "etcd: " + what() + ": " + endpoint() + " " + said,
                          message.error.grpcCode);
        }
      }
    }
    return std::nullopt;
  }

  // Creates the watch on one member, by the deadline: connection, request, and the stream's
  // first line, which must say "created".
  void openOn(std::size_t endpoint, Deadline deadline) {
    WatchRequest request = request_;
    if (next_ != 0) request.startRevision = next_;
    const std::string body = jsonText(wire::watchCreateBody(request));
    for (int tries = 0;; ++tries) {
      auto connection = std::make_unique<HttpConnection>(client_->options.endpoints[endpoint],
                                                         client_->tls, deadline);
      const std::string prefix = client_->apiPrefix(endpoint, *connection, deadline);
      const HttpHeaders headers = client_->headers(endpoint, *connection, deadline, tries > 0);
      std::string errorBody;
      const unsigned status =
          connection->startStream(prefix + "/watch", body, headers, deadline, errorBody);
      std::string buffer;
      if (status != 200) {
        wire::json parsed;
        if (auto error = client_->errorOf(endpoint, HttpResponse{status, errorBody}, parsed)) {
          if (error->grpcCode() == 16 && client_->options.credentials && tries == 0) continue;
          throw *error;
        }
        throw EtcdError(EtcdError::Code::kBadResponse,
                        "answered the watch with HTTP " + std::to_string(status));
      }
      for (;;) {
        if (auto line = takeLine(buffer)) {
          const wire::WatchMessage message = wire::parseWatchLine(*line);
          if (message.kind == wire::WatchMessage::Kind::kCreated) {
            if (next_ == 0) next_ = message.header.revision + 1;
            connection_ = std::move(connection);
            endpoint_ = endpoint;
            buffer_ = std::move(buffer);
            lastHeard_ = Clock::now();
            streamHeard_ = lastHeard_;
            return;
          }
          if (message.kind == wire::WatchMessage::Kind::kError) {
            if (message.error.grpcCode == 16 && client_->options.credentials && tries == 0) break;
            throw EtcdError(wire::codeForGrpc(message.error.grpcCode),
                            "etcd said '" + common::printablePrefix(message.error.message) +
                                "' (gRPC " + std::to_string(message.error.grpcCode) + ")",
                            message.error.grpcCode);
          }
          if (message.kind == wire::WatchMessage::Kind::kCanceled && message.compactRevision != 0) {
            throw EtcdError(EtcdError::Code::kCompacted,
                            "revision " + std::to_string(request.startRevision) +
                                " was compacted (the oldest kept is " +
                                std::to_string(message.compactRevision) + ")",
                            11, message.compactRevision);
          }
          if (message.kind == wire::WatchMessage::Kind::kCanceled) {
            // Created and canceled at once: etcd refuses this watch (a permission, say).
            throw EtcdError(
                EtcdError::Code::kRejected,
                "refused the watch: '" + common::printablePrefix(message.cancelReason) + "'");
          }
          throw EtcdError(EtcdError::Code::kBadResponse, "began the watch stream with '" +
                                                             common::printablePrefix(*line, 120) +
                                                             "' instead of saying it was created");
        }
        std::string bytes = connection->readStream(deadline);
        if (bytes.empty()) {
          throw TransportError(TransportError::Stage::kExchange, true,
                               "no answer to the watch's creation before the deadline");
        }
        buffer += bytes;
        if (buffer.size() > kMaxLineBytes) {
          throw EtcdError(EtcdError::Code::kBadResponse, "a watch stream line over 64 MiB");
        }
      }
    }
  }

  std::shared_ptr<EtcdClient::Impl> client_;
  WatchRequest request_;
  std::unique_ptr<HttpConnection> connection_;
  std::size_t endpoint_ = 0;
  std::string buffer_;  // bytes of the stream not yet taken as lines
  Revision next_ = 0;
  int resumes_ = 0;
  Clock::time_point lastHeard_;    // the stream's last message, or its member's last status answer
  Clock::time_point streamHeard_;  // the stream's last message (or its creation) alone
  bool memberAnswers_ = false;     // the stream was lost for its silence alone (lost())
  std::string lostBecause_;
};

}  // namespace

std::unique_ptr<EtcdWatch> EtcdClient::watch(const WatchRequest& request,
                                             std::optional<Deadline> deadline) {
  auto watch = std::make_unique<Watch>(impl_, request);
  watch->open(deadline ? *deadline : Clock::now() + impl_->options.timeout, false);
  return watch;
}

}  // namespace ddprun::rendezvous::etcd
