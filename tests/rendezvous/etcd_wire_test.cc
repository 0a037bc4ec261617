// The etcd client's pure parts (label unit): the endpoint list, base64, prefix range ends, and
// the gateway's JSON both ways, with answers written the way etcd 3.4's gateway writes them
// (int64 as strings, zero values left out; tests/rendezvous/etcd_client_test.cc checks these
// facts against a real etcd). And the password file's reader (a file in a temporary directory).
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "ddprun/rendezvous/etcd_client.h"
#include "etcd/base64.h"
#include "etcd/client_impl.h"
#include "etcd/json_wire.h"
#include "temp_dir.h"

using namespace ddprun::rendezvous::etcd;
using wire::json;

namespace {

EtcdError::Code codeOfThrow(const std::function<void()>& f) {
  try {
    f();
  } catch (const EtcdError& error) {
    return error.code();
  }
  FAIL("no EtcdError was thrown");
  return EtcdError::Code::kBadResponse;
}

std::string endpointError(const std::string& text) {
  try {
    parseEtcdEndpoints(text);
  } catch (const EtcdEndpointError& error) {
    return error.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("endpoints: host:port lists with default port, schemes and IPv6") {
  auto endpoints = parseEtcdEndpoints("127.0.0.1");
  REQUIRE(endpoints.size() == 1);
  CHECK(endpoints[0].scheme == EtcdEndpoint::Scheme::kHttp);
  CHECK(endpoints[0].host == "127.0.0.1");
  CHECK(endpoints[0].port == 2379);

  endpoints =
      parseEtcdEndpoints("etcd-0.etcd:12379, http://etcd_1:2, HTTPS://node3/,[::1]:2380,[fe80::1]");
  REQUIRE(endpoints.size() == 5);
  CHECK(endpoints[0] == EtcdEndpoint{EtcdEndpoint::Scheme::kHttp, "etcd-0.etcd", 12379});
  CHECK(endpoints[1] == EtcdEndpoint{EtcdEndpoint::Scheme::kHttp, "etcd_1", 2});
  CHECK(endpoints[2] == EtcdEndpoint{EtcdEndpoint::Scheme::kHttps, "node3", 2379});
  CHECK(endpoints[3] == EtcdEndpoint{EtcdEndpoint::Scheme::kHttp, "::1", 2380});
  CHECK(endpoints[4] == EtcdEndpoint{EtcdEndpoint::Scheme::kHttp, "fe80::1", 2379});
  CHECK(endpoints[2].text() == "https://node3:2379");
  CHECK(endpoints[3].text() == "http://[::1]:2380");
}

TEST_CASE("endpoints: each bad entry is one line naming it and the form to write") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "no endpoint is given"},
      {"a:1,,b:2", "an entry between commas is empty"},
      {"a:1,", "an entry between commas is empty"},
      {"a:0", "1 to 65535"},
      {"a:65536", "1 to 65535"},
      {"a:12x", "1 to 65535"},
      {"a:", "port after ':' is missing"},
      {"ftp://a:1", "http:// or https://"},
      {"::1:2379", "in brackets"},
      {"[::1:2379", "not closed"},
      {"[::1]x", "only ':port' may follow"},
      {"[not-v6]:1", "not an IPv6 address"},
      {"a:1/v3", "a path is not part"},
      {"a b:1", "only letters, digits"},
      {":2379", "the host is missing"},
      {"a:1,a:1", "listed twice"},
  };
  for (const auto& [text, problem] : bad) {
    INFO("endpoint list: '" << text << "'");
    const std::string message = endpointError(text);
    CHECK(message.find(problem) != std::string::npos);
    CHECK(message.find("write host:port, e.g. 127.0.0.1:2379") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  // An entry is quoted escaped.
  CHECK(endpointError("a\x1b[31m:1").find("\\x1b") != std::string::npos);
}

TEST_CASE(
    "endpoints: user information is refused and never repeated, wherever the entry is and "
    "whatever the password holds") {
  // entry list -> the entry as the message shows it
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://user:PASSWORD@etcd-0:2379", "http://***@etcd-0:2379"},
      {"https://user:PASSWORD@etcd-0", "https://***@etcd-0"},
      {"user:PASSWORD@etcd-0:2379", "***@etcd-0:2379"},
      {"etcd-1:2379,http://user:PASSWORD@etcd-0:2379", "http://***@etcd-0:2379"},
      // The checks that come later (a path, the scheme, an empty entry) never see the password.
      {"http://user:PASS/WORD@etcd-0:2379", "http://***@etcd-0:2379"},
      {"http://user:PASS@WORD@etcd-0:2379/v3", "http://***@etcd-0:2379/v3"},
      {"ftp://user:PASSWORD@etcd-0", "ftp://***@etcd-0"},
      {"http://user:PASSWORD@etcd-0,,b", "http://***@etcd-0"},
      // A ',' in the password splits the entry: neither half is quoted with it.
      {"http://user:PASS,WORD@etcd-0:2379", "***@etcd-0:2379"},
      {"http://user:PASS://WORD@etcd-0", "http://***@etcd-0"},
  };
  for (const auto& [text, shown] : cases) {
    INFO("endpoint list: '" << text << "'");
    const std::string message = endpointError(text);
    CHECK(message == "etcd endpoint '" + shown +
                         "': a user name or password does not go in the endpoint; give the user "
                         "as username=NAME and its password in a file only you can read as "
                         "password_file=PATH in --rdzv-conf");
    CHECK(message.find("WORD") == std::string::npos);
    CHECK(message.find("user:") == std::string::npos);
  }
}

TEST_CASE("base64: RFC 4648's vectors, every byte, and text that is not base64") {
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CHECK(base64Encode(plain) == encoded);
    CHECK(base64Decode(encoded) == plain);
  }
  std::string every;
  for (int i = 0; i < 256; ++i) every += static_cast<char>(i);
  for (std::size_t length = 0; length <= every.size(); length += 37) {
    const std::string part = every.substr(every.size() - length);
    CHECK(base64Decode(base64Encode(part)) == part);
  }
  CHECK(base64Encode("\xff\xfe\xfd") == "//79");
  for (const char* bad : {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg=", "Zm-_", "Zm 9"}) {
    INFO(bad);
    CHECK_FALSE(base64Decode(bad).has_value());
  }
}

TEST_CASE("prefix range end: the last byte below 0xff plus one, 0xff bytes dropped") {
  CHECK(prefixRangeEnd("a") == "b");
  CHECK(prefixRangeEnd("ddprun/job/") == "ddprun/job0");
  CHECK(prefixRangeEnd("a\xfe") == "a\xff");
  CHECK(prefixRangeEnd("a\xff") == "b");
  CHECK(prefixRangeEnd("a\xff\xff") == "b");
  CHECK(prefixRangeEnd(std::string("a\0", 2)) == std::string("a\x01", 2));
  // Nothing sorts above a run of 0xff bytes but its own extensions: to the end ("\0").
  CHECK(prefixRangeEnd("\xff") == std::string(1, '\0'));
  CHECK(prefixRangeEnd("\xff\xff") == std::string(1, '\0'));
  CHECK_THROWS_AS(prefixRangeEnd(""), std::invalid_argument);
  CHECK_THROWS_AS(KeyRange::prefix(""), std::invalid_argument);
  const KeyRange range = KeyRange::prefix("job/");
  CHECK(range.key == "job/");
  CHECK(range.rangeEnd == "job0");
  CHECK(KeyRange::single("k").rangeEnd.empty());
}

TEST_CASE("request bodies: base64 keys, int64 as strings, fields only when set") {
  RangeRequest range{KeyRange::prefix("foo"), 42, 10, true, false};
  CHECK(wire::rangeBody(range) ==
        json::parse(
            R"({"key":"Zm9v","range_end":"Zm9w","revision":"42","limit":"10","count_only":true})"));
  CHECK(wire::rangeBody(RangeRequest{KeyRange::single("foo")}) == json::parse(R"({"key":"Zm9v"})"));

  CHECK(
      wire::putBody(PutRequest{"foo", "bar", 7587823380406781187, true}) ==
      json::parse(R"({"key":"Zm9v","value":"YmFy","lease":"7587823380406781187","prev_kv":true})"));
  CHECK(wire::putBody(PutRequest{"foo", ""}) == json::parse(R"({"key":"Zm9v","value":""})"));
  CHECK(wire::deleteBody(DeleteRequest{KeyRange::prefix("foo"), true}) ==
        json::parse(R"({"key":"Zm9v","range_end":"Zm9w","prev_kv":true})"));
  CHECK(wire::leaseIdBody(-5) == json::parse(R"({"ID":"-5"})"));

  WatchRequest watch{KeyRange::prefix("foo"), 7, true, true};
  CHECK(wire::watchCreateBody(watch) ==
        json::parse(R"({"create_request":{"key":"Zm9v","range_end":"Zm9w","start_revision":"7",)"
                    R"("prev_kv":true,"progress_notify":true}})"));
  CHECK(wire::watchCreateBody(WatchRequest{KeyRange::single("k")}) ==
        json::parse(R"({"create_request":{"key":"aw=="}})"));
}

TEST_CASE("txn body: create-if-absent is CREATE create_revision \"0\" EQUAL") {
  const Txn txn = Txn()
                      .when(Compare::absent("key"))
                      .then(PutRequest{"key", "v", 42})
                      .otherwise(RangeRequest{KeyRange::single("key")});
  CHECK(wire::txnBody(txn) == json::parse(R"({
    "compare": [{"key": "a2V5", "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
    "success": [{"request_put": {"key": "a2V5", "value": "dg==", "lease": "42"}}],
    "failure": [{"request_range": {"key": "a2V5"}}]})"));

  const Txn every = Txn()
                        .when(Compare::modRevision("a", Compare::Result::kGreater, 9))
                        .when(Compare::version("b", Compare::Result::kLess, 3))
                        .when(Compare::value("c", Compare::Result::kNotEqual, "x"))
                        .when(Compare::lease("d", Compare::Result::kEqual, 77))
                        .then(DeleteRequest{KeyRange::prefix("p")});
  CHECK(wire::txnBody(every) == json::parse(R"({
    "compare": [
      {"key": "YQ==", "target": "MOD", "result": "GREATER", "mod_revision": "9"},
      {"key": "Yg==", "target": "VERSION", "result": "LESS", "version": "3"},
      {"key": "Yw==", "target": "VALUE", "result": "NOT_EQUAL", "value": "eA=="},
      {"key": "ZA==", "target": "LEASE", "result": "EQUAL", "lease": "77"}],
    "success": [{"request_delete_range": {"key": "cA==", "range_end": "cQ=="}}],
    "failure": []})"));
}

TEST_CASE("answers: int64 and uint64 as strings, and zero values left out") {
  const json full = json::parse(R"({
    "header": {"cluster_id": "14841639068965178418", "member_id": "10276657743932975437",
               "revision": "5", "raft_term": "2"},
    "kvs": [{"key": "Zm9v", "create_revision": "2", "mod_revision": "5", "version": "4",
             "value": "YmFy", "lease": "7587823380406781187"},
            {"key": "Zm9vMg==", "create_revision": "3", "mod_revision": "3", "version": "1"}],
    "count": "2"})");
  const RangeResult range = wire::parseRange(full);
  CHECK(range.header.clusterId == 14841639068965178418u);
  CHECK(range.header.memberId == 10276657743932975437u);
  CHECK(range.header.revision == 5);
  CHECK(range.header.raftTerm == 2);
  REQUIRE(range.kvs.size() == 2);
  CHECK(range.kvs[0] == KeyValue{"foo", "bar", 2, 5, 4, 7587823380406781187});
  CHECK(range.kvs[1] == KeyValue{"foo2", "", 3, 3, 1, 0});  // empty value, no lease: left out
  CHECK(range.count == 2);
  CHECK_FALSE(range.more);

  // An empty range: no kvs, no count.
  const RangeResult empty = wire::parseRange(json::parse(R"({"header": {"revision": "9"}})"));
  CHECK(empty.kvs.empty());
  CHECK(empty.count == 0);
  CHECK(empty.header.revision == 9);
  // Numbers as JSON numbers are read too (requests accept both; a proxy may rewrite).
  CHECK(wire::parseRange(json::parse(R"({"header": {"revision": 9}, "count": 1, "more": true})"))
            .more);

  for (const char* bad : {R"({"header": {"revision": "x"}})", R"({"header": {"revision": "1.5"}})",
                          R"({"header": {"member_id": "-1"}})", R"({"header": {"revision": true}})",
                          R"({"kvs": "none"})", R"({"kvs": [{"key": "***"}]})", R"({"kvs": [7]})",
                          R"({"header": []})", R"({"count": "99999999999999999999"})"}) {
    INFO(bad);
    CHECK(codeOfThrow([&] { wire::parseRange(json::parse(bad)); }) ==
          EtcdError::Code::kBadResponse);
  }
}

TEST_CASE("answers: txn, put, delete, leases, status") {
  // A failed txn: no "succeeded", no "responses".
  const TxnResult failed = wire::parseTxn(json::parse(R"({"header": {"revision": "7"}})"));
  CHECK_FALSE(failed.succeeded);
  CHECK(failed.responses.empty());

  const TxnResult done =
      wire::parseTxn(json::parse(R"({"header": {"revision": "8"}, "succeeded": true,
    "responses": [{"response_put": {"header": {"revision": "8"}}},
                  {"response_range": {"header": {}, "kvs": [{"key": "aw==", "version": "1"}], "count": "1"}},
                  {"response_delete_range": {"header": {}, "deleted": "2"}}]})"));
  CHECK(done.succeeded);
  REQUIRE(done.responses.size() == 3);
  CHECK(std::get<PutResult>(done.responses[0]).header.revision == 8);
  CHECK(std::get<RangeResult>(done.responses[1]).kvs.at(0).key == "k");
  CHECK(std::get<DeleteResult>(done.responses[2]).deleted == 2);
  CHECK(codeOfThrow([] {
          wire::parseTxn(json::parse(R"({"responses": [{"response_other": {}}]})"));
        }) == EtcdError::Code::kBadResponse);

  const PutResult put = wire::parsePut(json::parse(
      R"({"header": {}, "prev_kv": {"key": "aw==", "value": "dg==", "version": "3", "mod_revision": "6"}})"));
  REQUIRE(put.prevKv);
  CHECK(put.prevKv->value == "v");
  CHECK_FALSE(wire::parsePut(json::parse(R"({"header": {}})")).prevKv);
  CHECK(wire::parseDelete(json::parse(R"({"header": {}})")).deleted == 0);

  const LeaseGrant grant = wire::parseLeaseGrant(
      json::parse(R"({"header": {}, "ID": "7587823380406781187", "TTL": "10"})"));
  CHECK(grant.id == 7587823380406781187);
  CHECK(grant.ttlSeconds == 10);
  CHECK(codeOfThrow([] { wire::parseLeaseGrant(json::parse(R"({"header": {}})")); }) ==
        EtcdError::Code::kBadResponse);

  // The keep-alive is a stream message; an expired lease answers with no TTL.
  const LeaseKeepAlive alive =
      wire::parseKeepAlive(json::parse(R"({"result": {"header": {}, "ID": "12", "TTL": "5"}})"));
  CHECK(alive.id == 12);
  CHECK(alive.ttlSeconds == 5);
  CHECK(codeOfThrow([] {
          wire::parseKeepAlive(json::parse(R"({"result": {"header": {}, "ID": "12"}})"));
        }) == EtcdError::Code::kNotFound);

  const LeaseTimeToLive expired =
      wire::parseTimeToLive(json::parse(R"({"header": {}, "ID": "12", "TTL": "-1"})"));
  CHECK(expired.ttlSeconds == -1);
  CHECK(expired.grantedTtlSeconds == 0);
  const LeaseTimeToLive live = wire::parseTimeToLive(json::parse(
      R"({"header": {}, "ID": "12", "TTL": "4", "grantedTTL": "5", "keys": ["Zm9v", "YmFy"]})"));
  CHECK(live.keys == std::vector<std::string>{"foo", "bar"});

  const MemberStatus status = wire::parseStatus(json::parse(
      R"({"header": {"member_id": "3"}, "version": "3.4.23", "dbSize": "20480", "leader": "3", "raftIndex": "9", "raftTerm": "2"})"));
  CHECK(status.version == "3.4.23");
  CHECK(status.leader == 3);
  CHECK(status.header.memberId == 3);
  CHECK(wire::parseStatus(json::parse(R"({"header": {}})")).leader == 0);  // no leader: left out
}

TEST_CASE("errors: the gateway's two forms, and what each gRPC code means") {
  auto unary = wire::gatewayError(json::parse(
      R"({"error": "etcdserver: no leader", "code": 14, "message": "etcdserver: no leader"})"));
  REQUIRE(unary);
  CHECK(unary->grpcCode == 14);
  CHECK(unary->message == "etcdserver: no leader");
  auto stream = wire::gatewayError(json::parse(
      R"({"error": {"grpc_code": 16, "http_code": 401, "message": "etcdserver: invalid auth token", "http_status": "Unauthorized"}})"));
  REQUIRE(stream);
  CHECK(stream->grpcCode == 16);
  CHECK_FALSE(wire::gatewayError(json::parse(R"({"header": {}})")));

  CHECK(wire::codeForGrpc(14) == EtcdError::Code::kUnavailable);
  CHECK(wire::codeForGrpc(16) == EtcdError::Code::kAuth);
  CHECK(wire::codeForGrpc(7) == EtcdError::Code::kAuth);
  CHECK(wire::codeForGrpc(11) == EtcdError::Code::kCompacted);
  CHECK(wire::codeForGrpc(5) == EtcdError::Code::kNotFound);
  CHECK(wire::codeForGrpc(3) == EtcdError::Code::kRejected);
  CHECK(wire::codeForGrpc(8) == EtcdError::Code::kRejected);
  CHECK(wire::codeForGrpc(4) == EtcdError::Code::kTimeout);
  CHECK(wire::codeForGrpc(12) == EtcdError::Code::kUnsupported);
}

TEST_CASE("watch lines: created, events, progress, compaction, error") {
  auto created = wire::parseWatchLine(R"({"result":{"header":{"revision":"4"},"created":true}})");
  CHECK(created.kind == wire::WatchMessage::Kind::kCreated);
  CHECK(created.header.revision == 4);

  auto events = wire::parseWatchLine(
      R"({"result":{"header":{"revision":"6"},"events":[)"
      R"({"kv":{"key":"aw==","create_revision":"5","mod_revision":"5","version":"1","value":"dg=="}},)"
      R"({"type":"DELETE","kv":{"key":"aw==","mod_revision":"6"},"prev_kv":{"key":"aw==","value":"dg==","version":"1"}}]}})");
  CHECK(events.kind == wire::WatchMessage::Kind::kEvents);
  REQUIRE(events.events.size() == 2);
  CHECK(events.events[0].type == WatchEvent::Type::kPut);  // PUT = 0: left out
  CHECK(events.events[0].kv.value == "v");
  CHECK_FALSE(events.events[0].prevKv);
  CHECK(events.events[1].type == WatchEvent::Type::kDelete);
  CHECK(events.events[1].kv.modRevision == 6);
  REQUIRE(events.events[1].prevKv);
  CHECK(events.events[1].prevKv->value == "v");

  auto progress = wire::parseWatchLine(R"({"result":{"header":{"revision":"9"}}})");
  CHECK(progress.kind == wire::WatchMessage::Kind::kEvents);
  CHECK(progress.events.empty());

  auto compacted = wire::parseWatchLine(
      R"({"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"7"}})");
  CHECK(compacted.kind == wire::WatchMessage::Kind::kCanceled);
  CHECK(compacted.compactRevision == 7);

  auto error = wire::parseWatchLine(
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})");
  CHECK(error.kind == wire::WatchMessage::Kind::kError);
  CHECK(error.error.grpcCode == 14);

  for (const char* bad : {"not json", "[1]", R"({"other":{}})",
                          R"({"result":{"events":[{"type":"ELSE","kv":{}}]}})"}) {
    INFO(bad);
    CHECK(codeOfThrow([&] { wire::parseWatchLine(bad); }) == EtcdError::Code::kBadResponse);
  }
}

TEST_CASE("fail-over timing: each member's share of the time left, at most attemptTimeout") {
  EtcdClientOptions options;
  options.attemptTimeout = std::chrono::milliseconds(2000);
  const Clock::time_point now{};
  using std::chrono::milliseconds;
  // 3 members, 3 s left: 1 s each.
  CHECK(attemptEnd(options, now, now + milliseconds(3000), 3) == now + milliseconds(1000));
  // The last member left gets the rest, at most attemptTimeout.
  CHECK(attemptEnd(options, now, now + milliseconds(1500), 1) == now + milliseconds(1500));
  CHECK(attemptEnd(options, now, now + milliseconds(10000), 2) == now + milliseconds(2000));
  CHECK(roundPause(0) == milliseconds(100));
  CHECK(roundPause(1) == milliseconds(200));
  CHECK(roundPause(9) == milliseconds(1000));
  // Which code a call that failed everywhere ends with.
  using Code = EtcdError::Code;
  CHECK(mostTelling({}) == Code::kTimeout);
  CHECK(mostTelling({{0, Code::kUnreachable}, {1, Code::kUnreachable}}) == Code::kUnreachable);
  CHECK(mostTelling({{0, Code::kUnreachable}, {1, Code::kTimeout}}) == Code::kTimeout);
  CHECK(mostTelling({{0, Code::kTimeout}, {1, Code::kUnavailable}, {2, Code::kBadResponse}}) ==
        Code::kUnavailable);
}

TEST_CASE(
    "credentials: the password from a mode-600 file, its line end dropped, and a file others "
    "can read, an empty one, a missing one refused naming it") {
  ddprun::test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& bytes, mode_t mode) {
    return ddprun::test::writeFile(dir.file(name), bytes, mode);
  };
  const auto refusal = [](const std::string& path) -> std::string {
    try {
      readEtcdCredentials("alice", path);
    } catch (const EtcdError& error) {
      CHECK(error.code() == EtcdError::Code::kRejected);
      return error.what();
    }
    return "(accepted)";
  };

  const EtcdCredentials fromEcho = readEtcdCredentials("alice", write("echo", "s3cret pw\n", 0600));
  CHECK(fromEcho.user == "alice");
  CHECK(fromEcho.password == "s3cret pw");
  CHECK(readEtcdCredentials("bob", write("crlf", "pw\r\n", 0400)).password == "pw");
  CHECK(readEtcdCredentials("bob", write("bare", "pw", 0600)).password == "pw");

  const std::string open = write("open", "s3cret\n", 0644);
  const std::string openError = refusal(open);
  CHECK_THAT(openError, Catch::Contains("etcd password file " + open) &&
                            Catch::Contains("run `chmod 600 " + open + "`"));
  CHECK_THAT(openError, !Catch::Contains("s3cret"));
  CHECK_THAT(refusal(write("group", "pw", 0640)), Catch::Contains("chmod 600"));
  CHECK_THAT(refusal(write("empty", "\n", 0600)), Catch::Contains("is empty"));
  CHECK_THAT(refusal(write("latin1", "caf\xe9", 0600)), Catch::Contains("is not UTF-8 text"));
  CHECK_THAT(refusal(write("big", std::string(kMaxPasswordFileBytes + 1, 'x'), 0600)),
             Catch::Contains("is over 4096 bytes"));
  CHECK_THAT(refusal(dir.path + "/absent"), Catch::Contains("cannot read the etcd password file"));
  CHECK_THAT(refusal(dir.path), Catch::Contains("regular file"));
}
