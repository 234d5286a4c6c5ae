package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"
)

// The forms POST /v1/events accepts (docs/design/external-writers.md,
// "AWS S3"; ADR 0033):
//
//   - an S3 event notification, {"Records": [...]}, as MinIO's webhook
//     target and hoard's cachelets post it;
//   - an Amazon SNS message (an HTTPS subscription to the topic the
//     bucket notifies): a Notification's Message is the S3 event (or an
//     EventBridge event, when an EventBridge rule targets the topic); a
//     SubscriptionConfirmation is confirmed by a GET of its SubscribeURL
//     when that is SNS's own (confirmSNS); an UnsubscribeConfirmation is
//     logged;
//   - an EventBridge event of S3 (source aws.s3, detail-type Object
//     Created or Object Deleted), as an API destination posts it; it
//     becomes the record S3's notification would have had.
//
// Anything else is refused (400) and changes nothing. SNS's signature is
// not checked: the store's events token authenticates the sender, as it
// does MinIO's webhook (HTTP Basic, whose password it is, for SNS).

// snsConfirmTimeout bounds the GET that confirms an SNS subscription.
const snsConfirmTimeout = 10 * time.Second

// snsHost is the host of SNS's own SubscribeURLs: sns.<region>.amazonaws.com.
var snsHost = regexp.MustCompile(`^sns\.[a-z]{2}(-[a-z]+)+-[0-9]+\.amazonaws\.com$`)

// eventForm is a decoded POST /v1/events body.
type eventForm struct {
	ev *S3Event // the records, none when the body carries none
	// ignored says why a well-formed message carries nothing to act on
	// (S3's test event, a detail-type other than an object's creation or
	// removal, an unsubscription); "" otherwise.
	ignored string
	// confirm is the SNS subscription to confirm, nil otherwise.
	confirm *snsEnvelope
	aws     bool // an SNS message or an EventBridge event
}

// snsEnvelope is an SNS message to an HTTP(S) endpoint.
type snsEnvelope struct {
	Type         string  `json:"Type"`
	MessageID    string  `json:"MessageId"`
	TopicArn     string  `json:"TopicArn"`
	Message      *string `json:"Message"`
	SubscribeURL string  `json:"SubscribeURL"`
}

// ebEvent is an EventBridge event of S3.
type ebEvent struct {
	DetailType string `json:"detail-type"`
	Source     string `json:"source"`
	Time       string `json:"time"`
	Region     string `json:"region"`
	Detail     struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       string `json:"key"`
			Size      int64  `json:"size"`
			ETag      string `json:"etag"`
			Sequencer string `json:"sequencer"`
		} `json:"object"`
		Reason       string `json:"reason"`
		DeletionType string `json:"deletion-type"`
	} `json:"detail"`
}

// ebRecord is the S3 notification record an EventBridge event becomes.
type ebRecord struct {
	EventVersion string `json:"eventVersion"`
	EventSource  string `json:"eventSource"`
	AWSRegion    string `json:"awsRegion"`
	EventTime    string `json:"eventTime"`
	EventName    string `json:"eventName"`
	S3           struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       string `json:"key"`
			Size      int64  `json:"size"`
			ETag      string `json:"eTag"`
			Sequencer string `json:"sequencer,omitempty"`
		} `json:"object"`
	} `json:"s3"`
}

// decodeEventBody tells the form of a POST /v1/events body apart by its
// members; snsType is the request's x-amz-sns-message-type header.
func decodeEventBody(body []byte, snsType string) (*eventForm, error) {
	return decodeEventForm(body, snsType, true)
}

func decodeEventForm(body []byte, snsType string, outer bool) (*eventForm, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("not an S3 event, an SNS message or an EventBridge event: %w", err)
	}
	has := func(k string) bool { _, ok := top[k]; return ok }
	switch {
	case has("Records") || has("hoard"):
		var ev S3Event
		if err := json.Unmarshal(body, &ev); err != nil {
			return nil, fmt.Errorf("not an S3 event: %w", err)
		}
		if !outer && ev.Hoard != nil {
			return nil, errors.New("an SNS message's S3 event cannot name a cachelet (hoard)")
		}
		return &eventForm{ev: &ev, aws: !outer}, nil
	case has("detail-type") && has("source"):
		return decodeEventBridge(body)
	case outer && has("Type") && has("TopicArn"):
		return decodeSNS(body, snsType)
	case has("Event") && string(top["Event"]) == `"s3:TestEvent"`:
		return &eventForm{ev: &S3Event{}, ignored: "S3's test event", aws: !outer}, nil
	}
	return nil, errors.New("not an S3 event ({\"Records\": [...]}), an SNS message (Type, TopicArn) or an EventBridge event (detail-type, source)")
}

// decodeSNS decodes an SNS message.
func decodeSNS(body []byte, snsType string) (*eventForm, error) {
	var m snsEnvelope
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("not an SNS message: %w", err)
	}
	if snsType != "" && snsType != m.Type {
		return nil, fmt.Errorf("the SNS message is a %q, its header x-amz-sns-message-type says %q", m.Type, snsType)
	}
	switch m.Type {
	case "Notification":
		if m.Message == nil {
			return nil, errors.New("an SNS Notification without a Message")
		}
		f, err := decodeEventForm([]byte(*m.Message), "", false)
		if err != nil {
			return nil, fmt.Errorf("SNS message %s from %s: %w", m.MessageID, m.TopicArn, err)
		}
		return f, nil
	case "SubscriptionConfirmation":
		return &eventForm{ev: &S3Event{}, confirm: &m, aws: true}, nil
	case "UnsubscribeConfirmation":
		return &eventForm{ev: &S3Event{}, ignored: "SNS's unsubscription of " + m.TopicArn, aws: true}, nil
	}
	return nil, fmt.Errorf("SNS message type %q: want Notification, SubscriptionConfirmation or UnsubscribeConfirmation", m.Type)
}

// decodeEventBridge makes an EventBridge event of S3 the S3 notification
// record S3 would have sent: Object Created is ObjectCreated:<how>,
// Object Deleted ObjectRemoved:Delete (or DeleteMarkerCreated). Other
// detail-types of S3 (restores, tags, ACLs, ...) carry no write and are
// ignored. Its key is taken URL-encoded, as S3's notifications have it.
func decodeEventBridge(body []byte) (*eventForm, error) {
	var e ebEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("not an EventBridge event: %w", err)
	}
	if e.Source != "aws.s3" {
		return nil, fmt.Errorf("an EventBridge event of %q: only S3's (aws.s3) are events of objects", e.Source)
	}
	var name string
	switch e.DetailType {
	case "Object Created":
		switch e.Detail.Reason {
		case "PutObject":
			name = "ObjectCreated:Put"
		case "POST Object":
			name = "ObjectCreated:Post"
		case "CopyObject":
			name = "ObjectCreated:Copy"
		case "CompleteMultipartUpload":
			name = "ObjectCreated:CompleteMultipartUpload"
		default:
			name = "ObjectCreated:*"
		}
	case "Object Deleted":
		name = "ObjectRemoved:Delete"
		if e.Detail.DeletionType == "Delete Marker Created" {
			name = "ObjectRemoved:DeleteMarkerCreated"
		}
	default:
		return &eventForm{ev: &S3Event{}, ignored: "S3's " + e.DetailType + " events carry no write", aws: true}, nil
	}
	if e.Detail.Bucket.Name == "" || e.Detail.Object.Key == "" {
		return nil, fmt.Errorf("an EventBridge %s event without detail.bucket.name or detail.object.key", e.DetailType)
	}
	var r ebRecord
	r.EventVersion, r.EventSource, r.AWSRegion, r.EventTime, r.EventName = "2.1", "aws:s3", e.Region, e.Time, name
	r.S3.Bucket.Name = e.Detail.Bucket.Name
	r.S3.Object.Key, r.S3.Object.Size, r.S3.Object.ETag, r.S3.Object.Sequencer =
		e.Detail.Object.Key, e.Detail.Object.Size, e.Detail.Object.ETag, e.Detail.Object.Sequencer
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return &eventForm{ev: &S3Event{Records: []json.RawMessage{raw}}, aws: true}, nil
}

// checkSubscribeURL accepts SNS's own confirmation URLs only: https, no
// credentials or port, host sns.<region>.amazonaws.com, Action
// ConfirmSubscription of the envelope's topic. Anything else could make
// the controller call a host of the poster's choosing.
func checkSubscribeURL(m *snsEnvelope) (*url.URL, error) {
	u, err := url.Parse(m.SubscribeURL)
	if err != nil {
		return nil, fmt.Errorf("SubscribeURL: %w", err)
	}
	q := u.Query()
	switch {
	case u.Scheme != "https":
		return nil, errors.New("SubscribeURL is not https")
	case u.User != nil || u.Port() != "":
		return nil, errors.New("SubscribeURL names credentials or a port")
	case !snsHost.MatchString(u.Hostname()):
		return nil, fmt.Errorf("SubscribeURL's host %q is not sns.<region>.amazonaws.com", u.Hostname())
	case q.Get("Action") != "ConfirmSubscription":
		return nil, errors.New("SubscribeURL's Action is not ConfirmSubscription")
	case q.Get("TopicArn") != m.TopicArn:
		return nil, fmt.Errorf("SubscribeURL's TopicArn is not the message's %q", m.TopicArn)
	}
	return u, nil
}

// newSNSClient is the client that confirms SNS subscriptions: bounded,
// and following no redirect (a redirect could lead anywhere).
func newSNSClient() *http.Client {
	return &http.Client{
		Timeout: snsConfirmTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("SNS's confirmation redirects: not followed")
		},
	}
}

// confirmSNS confirms an SNS subscription by a GET of its SubscribeURL,
// once checkSubscribeURL accepts it; a refused URL is logged for the
// operator to confirm by hand, and nothing is fetched.
func (c *Controller) confirmSNS(ctx context.Context, m *snsEnvelope) error {
	u, err := checkSubscribeURL(m)
	if err != nil {
		c.log.Warn("SNS subscription not confirmed: confirm it by hand if it is yours",
			"topic", m.TopicArn, "subscribe_url", m.SubscribeURL, "err", err)
		return fmt.Errorf("SNS subscription to %s not confirmed: %w", m.TopicArn, err)
	}
	ctx, cancel := context.WithTimeout(ctx, snsConfirmTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.snsClient.Do(req)
	if err != nil {
		c.log.Warn("SNS subscription not confirmed", "topic", m.TopicArn, "subscribe_url", m.SubscribeURL, "err", err)
		return fmt.Errorf("%w: confirming the SNS subscription to %s: %w", errUpstream, m.TopicArn, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.log.Warn("SNS subscription not confirmed", "topic", m.TopicArn, "subscribe_url", m.SubscribeURL, "status", resp.StatusCode)
		return fmt.Errorf("%w: confirming the SNS subscription to %s: SNS answered %s", errUpstream, m.TopicArn, resp.Status)
	}
	c.log.Info("SNS subscription confirmed", "topic", m.TopicArn)
	return nil
}

// errUpstream marks a failure of a call the controller made (502).
var errUpstream = errors.New("upstream")
