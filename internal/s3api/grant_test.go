package s3api

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/grant"
	"github.com/hoard-io/hoard/internal/store"
)

// A cachelet with grants refuses every request outside them before the
// store sees it, and lists granted buckets only.
func TestBucketGrants(t *testing.T) {
	g, err := grant.NewSet([]grant.Bucket{{Name: "mine", Access: grant.ReadWrite}, {Name: "shared", Access: grant.ReadOnly}})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, Config{Region: testRegion, Grants: g})
	ctx := context.Background()
	for _, b := range []string{"mine", "shared", "theirs"} {
		if err := s.store.CreateBucket(ctx, b, testRegion); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.Put(ctx, b, "k", strings.NewReader("orig"), 4, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const denied = "AccessDenied"
	deleteXML := []byte(`<Delete><Object><Key>k</Key></Object></Delete>`)
	for _, tc := range []struct {
		what, method, target string
		body                 []byte
		hdr                  map[string]string
		status               int // 0: anything but 403
	}{
		// Another application's bucket: nothing.
		{"get theirs", "GET", "/theirs/k", nil, nil, 403},
		{"head theirs", "HEAD", "/theirs/k", nil, nil, 403},
		{"list theirs", "GET", "/theirs?list-type=2", nil, nil, 403},
		{"list v1 theirs", "GET", "/theirs", nil, nil, 403},
		{"head bucket theirs", "HEAD", "/theirs", nil, nil, 403},
		{"location theirs", "GET", "/theirs?location", nil, nil, 403},
		{"put theirs", "PUT", "/theirs/k", []byte("evil"), nil, 403},
		{"delete theirs", "DELETE", "/theirs/k", nil, nil, 403},
		{"delete objects theirs", "POST", "/theirs?delete", deleteXML, nil, 403},
		{"multipart theirs", "POST", "/theirs/k?uploads", nil, nil, 403},
		{"delete bucket theirs", "DELETE", "/theirs", nil, nil, 403},
		{"create bucket", "PUT", "/newbucket", nil, nil, 403},
		{"copy theirs to mine", "PUT", "/mine/stolen", nil, map[string]string{"x-amz-copy-source": "/theirs/k"}, 403},
		{"copy mine to theirs", "PUT", "/theirs/k", nil, map[string]string{"x-amz-copy-source": "/mine/k"}, 403},
		{"platform bucket", "GET", "/hoard-platform/apps/x.tar.gz", nil, nil, 403},
		// A read-only bucket: reads only.
		{"put shared", "PUT", "/shared/k", []byte("evil"), nil, 403},
		{"delete shared", "DELETE", "/shared/k", nil, nil, 403},
		{"delete objects shared", "POST", "/shared?delete", deleteXML, nil, 403},
		{"multipart shared", "POST", "/shared/k?uploads", nil, nil, 403},
		{"copy into shared", "PUT", "/shared/k", nil, map[string]string{"x-amz-copy-source": "/mine/k"}, 403},
		{"delete bucket shared", "DELETE", "/shared", nil, nil, 403},
		{"get shared", "GET", "/shared/k", nil, nil, 200},
		{"list shared", "GET", "/shared?list-type=2", nil, nil, 200},
		{"head bucket shared", "HEAD", "/shared", nil, nil, 200},
		{"copy shared to mine", "PUT", "/mine/copied", nil, map[string]string{"x-amz-copy-source": "/shared/k"}, 200},
		// Requests only the store answers are held to the same grants.
		{"versions theirs", "GET", "/theirs?versions", nil, nil, 403},
		{"versioned read theirs", "GET", "/theirs/k?versionId=1", nil, nil, 403},
		{"policy theirs", "GET", "/theirs?policy", nil, nil, 403},
		{"delete policy theirs", "DELETE", "/theirs?policy", nil, nil, 403},
		{"tagging theirs", "PUT", "/theirs/k?tagging", []byte("<Tagging><TagSet/></Tagging>"), nil, 403},
		{"platform bucket tagging", "GET", "/hoard-platform/apps/x.tar.gz?tagging", nil, nil, 403},
		{"platform bucket versions", "GET", "/hoard-platform?versions", nil, nil, 403},
		{"part copy from theirs", "PUT", "/mine/k?partNumber=1&uploadId=u", nil, map[string]string{"x-amz-copy-source": "/theirs/k"}, 403},
		{"versioned copy from theirs", "PUT", "/mine/stolen", nil, map[string]string{"x-amz-copy-source": "/theirs/k?versionId=1"}, 403},
		{"versioned copy from platform", "PUT", "/mine/stolen", nil, map[string]string{"x-amz-copy-source": "/hoard-platform/apps/x.tar.gz?versionId=1"}, 403},
		{"unparseable copy source", "PUT", "/mine/stolen", nil, map[string]string{"x-amz-copy-source": "/theirs/k?versionId=1&x=2"}, 403},
		{"versioning shared", "PUT", "/shared?versioning", []byte("<VersioningConfiguration/>"), nil, 403},
		{"policy shared", "PUT", "/shared?policy", []byte("{}"), nil, 403},
		{"delete policy shared", "DELETE", "/shared?policy", nil, nil, 403},
		{"versioned delete shared", "DELETE", "/shared/k?versionId=1", nil, nil, 403},
		{"retention shared", "PUT", "/shared/k?retention", []byte("<Retention/>"), nil, 403},
		{"locked put shared", "PUT", "/shared/k", []byte("evil"), map[string]string{"x-amz-object-lock-legal-hold": "ON"}, 403},
		{"versioned delete objects shared", "POST", "/shared?delete", []byte(`<Delete><Object><Key>k</Key><VersionId>1</VersionId></Object></Delete>`), nil, 403},
		{"delete bucket shared by another name", "DELETE", "/shared?unheard-of", nil, nil, 403},
		{"delete bucket mine by another name", "DELETE", "/mine?versionId=1", nil, nil, 403},
		{"service-level pass", "GET", "/?max-buckets=1", nil, nil, 403},
		{"service-level post", "POST", "/", nil, nil, 403},
		{"versions shared", "GET", "/shared?versions", nil, nil, 0},
		{"tagging read shared", "GET", "/shared/k?tagging", nil, nil, 0},
		{"part read shared", "GET", "/shared/k?partNumber=1", nil, nil, 0},
		{"policy mine", "PUT", "/mine?policy", []byte("{}"), nil, 0},
		{"versioned delete mine", "DELETE", "/mine/k?versionId=1", nil, nil, 0},
		// The application's own bucket: everything but deleting it.
		{"put mine", "PUT", "/mine/new", []byte("new"), nil, 200},
		{"get mine", "GET", "/mine/k", nil, nil, 200},
		{"delete mine", "DELETE", "/mine/new", nil, nil, 204},
		{"delete bucket mine", "DELETE", "/mine", nil, nil, 403},
		{"create mine", "PUT", "/mine", nil, nil, 0},
	} {
		resp := s.do(t, tc.method, tc.target, tc.body, tc.hdr)
		switch {
		case tc.status == 403:
			if resp.StatusCode != 403 {
				t.Errorf("%s: status %d, want 403", tc.what, resp.StatusCode)
			} else if tc.method != "HEAD" {
				if code := errorCodeOf(t, resp); code != denied {
					t.Errorf("%s: code %s, want %s", tc.what, code, denied)
				}
			}
		case tc.status == 0:
			if resp.StatusCode == 403 {
				t.Errorf("%s: refused", tc.what)
			}
		case resp.StatusCode != tc.status:
			data, _ := io.ReadAll(resp.Body)
			t.Errorf("%s: status %d, want %d: %s", tc.what, resp.StatusCode, tc.status, data)
		}
	}
	for _, b := range []string{"theirs", "shared"} {
		body, _, _, err := s.store.Get(ctx, b, "k", storeGetAll)
		if err != nil {
			t.Fatalf("%s/k: %v", b, err)
		}
		data, _ := io.ReadAll(body)
		body.Close()
		if string(data) != "orig" {
			t.Errorf("%s/k = %q after the refused writes", b, data)
		}
	}
	if _, _, _, err := s.store.Get(ctx, "mine", "stolen", storeGetAll); err == nil {
		t.Error("an object of another bucket was copied in")
	}
	if err := s.store.HeadBucket(ctx, "newbucket"); err == nil {
		t.Error("a bucket was created")
	}

	resp := s.do(t, "GET", "/", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ListBuckets: %d", resp.StatusCode)
	}
	var res listAllMyBucketsResult
	data, _ := io.ReadAll(resp.Body)
	if err := xml.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range res.Buckets {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"mine", "shared"}) {
		t.Errorf("ListBuckets = %v, want the granted buckets [mine shared]", names)
	}
}

// Without grants (a standalone cachelet) every bucket is served.
func TestNoGrantsServesEverything(t *testing.T) {
	s := newTestServer(t)
	if resp := s.do(t, "PUT", "/another", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("create bucket: %d", resp.StatusCode)
	}
	if resp := s.do(t, "PUT", "/another/k", []byte("x"), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	if resp := s.do(t, "DELETE", "/another/k", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
}
