package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/changerelay"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// The payloads below follow the formats AWS documents: S3's event
// notification (notification-content-structure), SNS's HTTP(S) messages
// (http-notification-json, http-subscription-confirmation-json), and
// S3's EventBridge events (ev-events).

const topicArn = "arn:aws:sns:us-west-2:123456789012:MyTopic"

// s3Notification is S3's own notification of one record.
func s3Notification(name, bucket, key, etag string) string {
	return `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-west-2",` +
		`"eventTime":"` + time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + `","eventName":"` + name + `",` +
		`"userIdentity":{"principalId":"AIDAJDPLRKLG7UEXAMPLE"},"requestParameters":{"sourceIPAddress":"127.0.0.1"},` +
		`"responseElements":{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},` +
		`"s3":{"s3SchemaVersion":"1.0","configurationId":"testConfigRule","bucket":{"name":"` + bucket + `",` +
		`"ownerIdentity":{"principalId":"A3NL1KOZZKExample"},"arn":"arn:aws:s3:::` + bucket + `"},` +
		`"object":{"key":"` + key + `","size":1024,"eTag":"` + etag + `","versionId":"096fKKXTRTtl3on89fVO.nfljtsv6qko","sequencer":"0055AED6DCD90281E5"}}}]}`
}

// snsNotification wraps message as SNS delivers it to an HTTPS endpoint.
func snsNotification(message string) string {
	m, _ := json.Marshal(message)
	return `{"Type":"Notification","MessageId":"22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324","TopicArn":"` + topicArn + `",` +
		`"Subject":"Amazon S3 Notification","Message":` + string(m) + `,"Timestamp":"2012-05-02T00:54:06.655Z",` +
		`"SignatureVersion":"1","Signature":"EXAMPLEw6JRN","SigningCertURL":"https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",` +
		`"UnsubscribeURL":"https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=` + topicArn + `:c9135db0-26c4-47ec-8998-413945fb5a96"}`
}

// snsConfirmation is SNS's SubscriptionConfirmation with subscribeURL.
func snsConfirmation(subscribeURL string) string {
	u, _ := json.Marshal(subscribeURL)
	return `{"Type":"SubscriptionConfirmation","MessageId":"165545c9-2a5c-472c-8df2-7ff2be2b3b1b","Token":"2336412f37",` +
		`"TopicArn":"` + topicArn + `","Message":"You have chosen to subscribe to the topic ` + topicArn + `.\nTo confirm the subscription, visit the SubscribeURL included in this message.",` +
		`"SubscribeURL":` + string(u) + `,"Timestamp":"2012-04-26T20:45:04.751Z","SignatureVersion":"1","Signature":"EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=",` +
		`"SigningCertURL":"https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"}`
}

const s3TestEvent = `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2014-10-13T15:57:02.089Z","Bucket":"abucket",` +
	`"RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}`

// eventBridge is S3's EventBridge event of detailType for bucket/key;
// detail is the rest of its detail (reason, deletion-type).
func eventBridge(detailType, bucket, key, etag, detail string) string {
	return `{"version":"0","id":"17793124-05d4-b198-2fde-7ededc63b103","detail-type":"` + detailType + `","source":"aws.s3",` +
		`"account":"111122223333","time":"` + time.Now().UTC().Format(time.RFC3339) + `","region":"ca-central-1",` +
		`"resources":["arn:aws:s3:::` + bucket + `"],"detail":{"version":"0","bucket":{"name":"` + bucket + `"},` +
		`"object":{"key":"` + key + `","size":5,"etag":"` + etag + `","version-id":"IYV3p45BT0ac8hjHg1houSdS1a.Mro8e","sequencer":"617f08299329d189"},` +
		`"request-id":"N4N7GDK58NMKJ12R","requester":"123456789012","source-ip-address":"1.2.3.4",` + detail + `}}`
}

type answer struct {
	status int
	body   string
	header http.Header
}

// postAs posts body to /v1/events with the given Authorization header
// (none when empty) and SNS message type header (none when empty).
func postAs(t *testing.T, srv, auth, snsType, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv+"/v1/events", strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if snsType != "" {
		req.Header.Set("x-amz-sns-message-type", snsType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

// toServer sends every request to one test server, keeping the Host the
// request named: the stand-in for SNS, so that nothing leaves loopback.
type toServer struct{ host string }

func (t toServer) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host = "http", t.host, r.URL.Host
	return http.DefaultTransport.RoundTrip(r2)
}

// TestAWSEvents: AWS S3's notifications, through SNS (Basic auth) or
// EventBridge (bearer), are relayed and fire triggers as the store's
// plain ones do; an SNS subscription is confirmed at SNS's own host and
// nowhere else; bad credentials and bad bodies are refused.
func TestAWSEvents(t *testing.T) {
	const storeTok = "store-events-0123456789"
	const admin = "admin-token-0123456789"
	ms := memstore.New()
	ctx := context.Background()
	if err := ms.CreateBucket(ctx, "abucket", ""); err != nil {
		t.Fatal(err)
	}
	c, _, _ := setupWith(t, Config{Store: ms, StoreEventsToken: storeTok,
		ChangeRelay: changerelay.Config{ProbeInterval: 50 * time.Millisecond, ProbeBound: 2 * time.Second}})
	for _, s := range []string{specA, specB} {
		if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	credsA, _ := c.Credentials("a")
	credsB, _ := c.Credentials("b")

	// SNS's stand-in: every request the controller makes lands here.
	var mu sync.Mutex
	var fetched []*http.Request
	sns := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetched = append(fetched, r)
		mu.Unlock()
	}))
	t.Cleanup(sns.Close)
	c.snsClient.Transport = toServer{strings.TrimPrefix(sns.URL, "http://")}
	hits := func() []*http.Request {
		mu.Lock()
		defer mu.Unlock()
		return append([]*http.Request(nil), fetched...)
	}

	srv := httptest.NewServer(c.Handler(admin, nil))
	t.Cleanup(srv.Close)
	viaSNS := basic("hoard", storeTok)

	// The webhook: the probes' events, through SNS as AWS would post them.
	hookCtx, stopHook := context.WithCancel(ctx)
	t.Cleanup(stopHook)
	go func() {
		last := ""
		for hookCtx.Err() == nil {
			info, err := ms.Stat(hookCtx, "abucket", changerelay.ProbeKey)
			if err == nil && info.ETag != last {
				last = info.ETag
				req, _ := http.NewRequestWithContext(hookCtx, http.MethodPost, srv.URL+"/v1/events",
					strings.NewReader(snsNotification(s3Notification("ObjectCreated:Put", "abucket", changerelay.ProbeKey, info.ETag))))
				req.Header.Set("Authorization", viaSNS)
				req.Header.Set("x-amz-sns-message-type", "Notification")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			time.Sleep(10 * time.Millisecond) // the webhook's pace, not a synchronization
		}
	}()
	a := startFollow(srv.URL, credsA.PlatformToken, "abucket")
	t.Cleanup(a.cancel)
	select {
	case <-a.ready:
	case err := <-a.done:
		t.Fatalf("stream ended before ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s: the probes' SNS notifications did not come through")
	}

	fired := func(t *testing.T, ans answer, want int) {
		t.Helper()
		var got map[string]int
		if ans.status != 200 || json.Unmarshal([]byte(ans.body), &got) != nil || got["fired"] != want {
			t.Fatalf("answer %d %s, want 200 fired %d", ans.status, ans.body, want)
		}
	}

	t.Run("SNS notification of an S3 event", func(t *testing.T) {
		body := snsNotification(s3Notification("ObjectCreated:Put", "abucket", "photos/Happy+Face.jpg", "d41d8cd98f00b204e9800998ecf8427e"))
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", body), 1)
		if ch := a.next(t); ch.Key != "photos/Happy Face.jpg" || ch.ETag != "d41d8cd98f00b204e9800998ecf8427e" || ch.Removed || ch.Time.IsZero() {
			t.Errorf("relayed %+v, want photos/Happy Face.jpg created", ch)
		}
		// SNS delivers at least once: its retry fires nothing again (and
		// is relayed again, which tells the cachelets nothing new).
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", body), 0)
		if ch := a.next(t); ch.Key != "photos/Happy Face.jpg" || ch.Removed {
			t.Errorf("relayed %+v, want photos/Happy Face.jpg created again", ch)
		}
		// Its removal.
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", snsNotification(s3Notification("ObjectRemoved:Delete", "abucket", "photos/Happy+Face.jpg", ""))), 0)
		if ch := a.next(t); ch.Key != "photos/Happy Face.jpg" || !ch.Removed {
			t.Errorf("relayed %+v, want photos/Happy Face.jpg removed", ch)
		}
	})

	t.Run("S3's test event through SNS changes nothing", func(t *testing.T) {
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", snsNotification(s3TestEvent)), 0)
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", snsNotification(s3Notification("ObjectCreated:Put", "abucket", "after-test", "e9"))), 1)
		if ch := a.next(t); ch.Key != "after-test" {
			t.Errorf("relayed %+v, want after-test (the test event relays nothing)", ch)
		}
	})

	t.Run("EventBridge events", func(t *testing.T) {
		bearer := "Bearer " + storeTok
		fired(t, postAs(t, srv.URL, bearer, "", eventBridge("Object Created", "abucket", "eb/a+b%2B1", "b1946ac92492d2347c6235b4d2611184", `"reason":"PutObject"`)), 1)
		if ch := a.next(t); ch.Key != "eb/a b+1" || ch.ETag != "b1946ac92492d2347c6235b4d2611184" {
			t.Errorf("relayed %+v, want eb/a b+1 (the key URL-encoded, as S3's records have it)", ch)
		}
		fired(t, postAs(t, srv.URL, bearer, "", eventBridge("Object Created", "abucket", "eb/key", "b1946ac92492d2347c6235b4d2611184", `"reason":"PutObject"`)), 1)
		if ch := a.next(t); ch.Key != "eb/key" || ch.ETag != "b1946ac92492d2347c6235b4d2611184" || ch.Removed || ch.Time.IsZero() {
			t.Errorf("relayed %+v, want eb/key created", ch)
		}
		fired(t, postAs(t, srv.URL, bearer, "", eventBridge("Object Deleted", "abucket", "eb/key", "", `"reason":"DeleteObject","deletion-type":"Permanently Deleted"`)), 0)
		if ch := a.next(t); ch.Key != "eb/key" || !ch.Removed {
			t.Errorf("relayed %+v, want eb/key removed", ch)
		}
		// A restore carries no write; an EventBridge rule targeting the
		// SNS topic wraps the same event.
		fired(t, postAs(t, srv.URL, bearer, "", eventBridge("Object Restore Completed", "abucket", "eb/key", "x", `"source-storage-class":"GLACIER"`)), 0)
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", snsNotification(eventBridge("Object Created", "abucket", "eb/sns", "e2", `"reason":"CopyObject"`))), 1)
		if ch := a.next(t); ch.Key != "eb/sns" || ch.Removed {
			t.Errorf("relayed %+v, want eb/sns created (not the restore)", ch)
		}
	})

	t.Run("subscription confirmed at SNS only", func(t *testing.T) {
		for _, u := range []string{
			sns.URL + "/?Action=ConfirmSubscription&TopicArn=" + topicArn + "&Token=1",
			"https://" + strings.TrimPrefix(sns.URL, "http://") + "/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"https://sns.us-west-2.amazonaws.com.evil.example/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"https://evil.example/sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"https://user@sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"https://sns.us-west-2.amazonaws.com:8443/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"http://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn,
			"https://sns.us-west-2.amazonaws.com/?Action=Publish&TopicArn=" + topicArn,
			"https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-west-2:123456789012:Other",
			"https://s3.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn,
		} {
			if ans := postAs(t, srv.URL, viaSNS, "SubscriptionConfirmation", snsConfirmation(u)); ans.status != 400 || !strings.Contains(ans.body, "not confirmed") {
				t.Errorf("SubscribeURL %s: %d %s, want 400 not confirmed", u, ans.status, ans.body)
			}
		}
		if h := hits(); len(h) != 0 {
			t.Fatalf("%d requests left the controller for refused SubscribeURLs (first: %s %s)", len(h), h[0].Host, h[0].URL)
		}
		// An application's token may not have the controller call out.
		good := "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn + "&Token=2336412f37"
		if ans := postAs(t, srv.URL, "Bearer "+credsA.PlatformToken, "SubscriptionConfirmation", snsConfirmation(good)); ans.status != 403 {
			t.Errorf("an application's confirmation: %d %s, want 403", ans.status, ans.body)
		}
		if h := hits(); len(h) != 0 {
			t.Fatal("an application's token had the controller call SNS")
		}
		fired(t, postAs(t, srv.URL, viaSNS, "SubscriptionConfirmation", snsConfirmation(good)), 0)
		h := hits()
		if len(h) != 1 || h[0].Method != http.MethodGet || h[0].Host != "sns.us-west-2.amazonaws.com" || h[0].URL.Query().Get("Token") != "2336412f37" {
			t.Fatalf("confirmation requests %v, want one GET of the SubscribeURL", h)
		}
		unsub := strings.Replace(snsConfirmation(good), "SubscriptionConfirmation", "UnsubscribeConfirmation", 1)
		fired(t, postAs(t, srv.URL, viaSNS, "UnsubscribeConfirmation", unsub), 0)
		if len(hits()) != 1 {
			t.Error("an UnsubscribeConfirmation had the controller call out")
		}
	})

	t.Run("credentials", func(t *testing.T) {
		body := snsNotification(s3Notification("ObjectCreated:Put", "abucket", "cred", "e"))
		for _, tc := range []struct {
			name, auth string
			want       int
		}{
			{"none", "", 401},
			{"Basic, wrong password", basic("hoard", "not-the-token-0123456789"), 401},
			{"Basic, the token as user name", basic(storeTok, ""), 401},
			{"Basic, an application's token", basic("hoard", credsA.PlatformToken), 401},
			{"Basic, the admin token", basic("hoard", admin), 401},
			{"bearer, an application's token", "Bearer " + credsA.PlatformToken, 403},
		} {
			ans := postAs(t, srv.URL, tc.auth, "Notification", body)
			if ans.status != tc.want {
				t.Errorf("%s: %d %s, want %d", tc.name, ans.status, ans.body, tc.want)
			}
			if tc.want == 401 && !strings.HasPrefix(ans.header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s: 401 without a Basic challenge (SNS may wait for one)", tc.name)
			}
		}
		// Basic opens nothing but events.
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/apps", nil)
		req.Header.Set("Authorization", viaSNS)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
			t.Errorf("Basic on /v1/apps: %v %v, want 403", resp, err)
		} else {
			resp.Body.Close()
		}
		// Another application's token naming A's bucket: 403, as before.
		if ans := postAs(t, srv.URL, "Bearer "+credsB.PlatformToken, "", event("b", "abucket", "x")); ans.status != 403 {
			t.Errorf("B's token on A's bucket: %d %s, want 403", ans.status, ans.body)
		}
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", body), 1)
		if ch := a.next(t); ch.Key != "cred" {
			t.Errorf("relayed %+v, want cred (nothing refused was relayed)", ch)
		}
	})

	t.Run("bad bodies", func(t *testing.T) {
		for _, tc := range []struct{ name, snsType, body string }{
			{"not JSON", "", "Records"},
			{"no known form", "", `{"Bucket":"abucket","Key":"k"}`},
			{"EventBridge, not S3's", "", strings.Replace(eventBridge("Object Created", "abucket", "k", "e", `"reason":"PutObject"`), `"aws.s3"`, `"aws.ec2"`, 1)},
			{"EventBridge, no key", "", eventBridge("Object Created", "abucket", "", "e", `"reason":"PutObject"`)},
			{"SNS, unknown type", "", strings.Replace(snsNotification(s3TestEvent), `"Notification"`, `"Bogus"`, 1)},
			{"SNS, header disagrees", "SubscriptionConfirmation", snsNotification(s3TestEvent)},
			{"SNS, message not an event", "Notification", snsNotification("hello")},
			{"SNS, message claims a cachelet", "Notification", snsNotification(event("a", "abucket", "k"))},
			{"SNS inside SNS", "Notification", snsNotification(snsNotification(s3TestEvent))},
		} {
			if ans := postAs(t, srv.URL, viaSNS, tc.snsType, tc.body); ans.status != 400 {
				t.Errorf("%s: %d %s, want 400", tc.name, ans.status, ans.body)
			}
		}
		big := snsNotification(s3Notification("ObjectCreated:Put", "abucket", strings.Repeat("k", 7<<20), "e"))
		if ans := postAs(t, srv.URL, viaSNS, "Notification", big); ans.status != 413 {
			t.Errorf("a 7 MiB message: %d, want 413", ans.status)
		}
		fired(t, postAs(t, srv.URL, viaSNS, "Notification", snsNotification(s3Notification("ObjectCreated:Put", "abucket", "last", "e"))), 1)
		if ch := a.next(t); ch.Key != "last" {
			t.Errorf("relayed %+v, want last (nothing refused was relayed)", ch)
		}
	})
}

// TestCheckSubscribeURL: SNS's own confirmation URLs, in any region,
// and nothing else.
func TestCheckSubscribeURL(t *testing.T) {
	m := &snsEnvelope{TopicArn: topicArn}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn + "&Token=t", true},
		{"https://sns.ap-southeast-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + url.QueryEscape(topicArn), true},
		{"https://sns.us-gov-west-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn, true},
		{"https://sns.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"https://sns.us-west-2.amazonaws.com.cn/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"https://xsns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"https://sns.us-west-2.amazonaws.com@127.0.0.1/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"https://127.0.0.1/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"https://[::1]/?Action=ConfirmSubscription&TopicArn=" + topicArn, false},
		{"", false},
		{"://", false},
	} {
		m.SubscribeURL = tc.url
		if _, err := checkSubscribeURL(m); (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok %v", tc.url, err, tc.ok)
		}
	}
}
