package pvesim

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Storage downloads and uploads: pve-storage src/PVE/API2/Storage/Status.pm download_url and upload,
// PVE::Tools::download_file_from_url, PVE::Storage normalize_content_filename and the extension regexes
// ($ISO_EXT_RE_0, $VZTMPL_EXT_RE_1, $UPLOAD_IMPORT_EXT_RE_1, $SAFE_CHAR_CLASS_RE).
//
// The simulator never opens a connection beyond loopback: a URL on 127.0.0.0/8, ::1 or localhost is
// fetched for real (every dial must reach a loopback IP and redirects may only point at loopback); any other URL is served from the mirror map (URL → local file), or without a mapping
// gets synthetic content when no checksum is given and fails naming the missing mirror when one is.

var (
	reISOExt       = regexp.MustCompile(`(?i)^[^/]+\.(?:iso|img)$`)
	reVztmplExt    = regexp.MustCompile(`(?i)^[^/]+\.(tar|tar\.(gz|xz|zst|bz2))$`)
	reUploadImport = regexp.MustCompile(`^[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)$`)
	reUnsafeChar   = regexp.MustCompile(`[^a-zA-Z0-9_.\-]`)
)

// syntheticDownloadSize is the size of the synthetic content an unmirrored URL yields.
const syntheticDownloadSize = 1 << 20

// normalizeFilename is PVE::Storage::normalize_content_filename: the directory part is dropped and every
// character outside [a-zA-Z0-9_.-] becomes '_'.
func normalizeFilename(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return reUnsafeChar.ReplaceAllString(name, "_")
}

// uploadTarget checks the storage, content type and filename of a download or upload and returns the
// volume id and the destination path.
func (s *Sim) uploadTarget(c *call) (st *storage, filename, volid, dest string, err error) {
	nodeName, sid, content := c.str("node"), c.str("storage"), c.str("content")
	st = s.storage(sid)
	if st == nil {
		return nil, "", "", "", dieErr("storage '%s' does not exist", sid)
	}
	if !st.onNode(nodeName) || st.disabled {
		return nil, "", "", "", dieErr("storage '%s' is not available on node '%s'", sid, nodeName)
	}
	if !st.fileBased() {
		return nil, "", "", "", dieErr("can't upload to storage type '%s', not a file based storage!", st.typ)
	}
	if !st.content[content] {
		return nil, "", "", "", dieErr("storage '%s' is not configured for content-type '%s'", sid, content)
	}
	filename = normalizeFilename(c.str("filename"))
	var subdir, dir string
	switch content {
	case "iso":
		if !reISOExt.MatchString(filename) {
			return nil, "", "", "", paramErr(map[string]string{"filename": "wrong file extension"})
		}
		subdir, dir = "iso", "template/iso"
	case "vztmpl":
		if !reVztmplExt.MatchString(filename) {
			return nil, "", "", "", paramErr(map[string]string{"filename": "wrong file extension"})
		}
		subdir, dir = "vztmpl", "template/cache"
	case "import":
		if !reUploadImport.MatchString(filename) {
			return nil, "", "", "", paramErr(map[string]string{"filename": "invalid filename or wrong extension"})
		}
		subdir, dir = "import", "import"
	default:
		return nil, "", "", "", paramErr(map[string]string{"content": fmt.Sprintf("upload content-type '%s' is not allowed", content)})
	}
	return st, filename, st.id + ":" + subdir + "/" + filename, st.path + "/" + dir + "/" + filename, nil
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "md5":
		return md5.New()
	case "sha1":
		return sha1.New()
	case "sha224":
		return sha256.New224()
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return sha256.New()
}

func hashBytes(algo string, b []byte) string {
	h := newHash(algo)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// syntheticReader yields size deterministic bytes derived from the volume id.
func syntheticReader(volid string, size int64) io.Reader {
	block := []byte(strings.Repeat(sha1Hex("synthetic:"+volid), 64))
	return io.LimitReader(&repeatReader{block: block}, size)
}

type repeatReader struct {
	block []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.block[r.off:])
		n += c
		r.off = (r.off + c) % len(r.block)
	}
	return n, nil
}

// volumeHash hashes a file volume's content (held data, a local file, or synthetic bytes).
func volumeHash(algo string, v volume) (string, error) {
	h := newHash(algo)
	switch {
	case v.data != nil:
		h.Write(v.data)
	case v.path != "":
		f, err := os.Open(v.path)
		if err != nil {
			return "", fmt.Errorf("unable to open file '%s' - %w", v.path, err)
		}
		defer func() { _ = f.Close() }()
		if _, err := io.Copy(h, f); err != nil {
			return "", fmt.Errorf("read '%s': %w", v.path, err)
		}
	default:
		if _, err := io.Copy(h, syntheticReader(v.volid, v.size)); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// isLoopbackURL reports whether a URL's host is 127.0.0.0/8, ::1 or localhost.
func isLoopbackURL(u *url.URL) bool {
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errNotLoopback refuses a connection or redirect that would leave loopback.
var errNotLoopback = errors.New("the simulator only connects to loopback")

// loopbackOnlyControl is a net.Dialer Control that refuses any address that is not a loopback IP, so a
// name such as localhost resolving elsewhere is refused before a connection is made.
func loopbackOnlyControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("dial %s %s: %w", network, address, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("dial %s %s: %w", network, address, errNotLoopback)
	}
	return nil
}

// loopbackClient is an HTTP client that connects only to loopback addresses and follows redirects only
// to loopback URLs (at most 10, as net/http's default policy).
func loopbackClient(verify bool) (*http.Client, *http.Transport) {
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: loopbackOnlyControl}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: !verify}, Proxy: nil,
		DialContext: dialer.DialContext}
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !isLoopbackURL(req.URL) {
				return fmt.Errorf("redirect to '%s': %w", req.URL.Redacted(), errNotLoopback)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}}
	return client, tr
}

// fetchURL gets a download's bytes without leaving loopback: a loopback URL is fetched (redirects only
// within loopback), any other URL comes from the mirror map or synthetic content.
func (s *Sim) fetchURL(rawURL string, verify bool, haveChecksum bool) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("unable to parse URL '%s'", rawURL)
	}
	if isLoopbackURL(u) {
		client, tr := loopbackClient(verify)
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, rawURL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			// The wording of PVE's wget failure is not reproduced; see docs/simulator.md.
			return nil, fmt.Errorf("download failed: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("download failed: %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	s.mu.Lock()
	mirror, ok := s.mirrors[rawURL]
	s.mu.Unlock()
	if ok {
		b, err := os.ReadFile(mirror)
		if err != nil {
			return nil, fmt.Errorf("download failed: mirror of '%s': %w", rawURL, err)
		}
		return b, nil
	}
	if haveChecksum {
		return nil, fmt.Errorf("download failed: the simulator has no mirror for '%s' (add it to the spec's mirrors)", rawURL)
	}
	b, _ := io.ReadAll(syntheticReader(rawURL, syntheticDownloadSize))
	return b, nil
}

// decompress undoes download-url's compression (iso only). gz and bz2 are decompressed; zst and lzo
// content is kept as is (the simulator has no decoder for them).
func decompress(b []byte, algo string) ([]byte, error) {
	switch algo {
	case "gz":
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("decompression failed: %w", err)
		}
		return io.ReadAll(r)
	case "bz2":
		return io.ReadAll(bzip2.NewReader(bytes.NewReader(b)))
	}
	return b, nil
}

// imageVirtualSize reads the virtual size from a qcow2 header (offset 24, big-endian bytes) or a sparse
// VMDK header (capacity in sectors at offset 12, little-endian).
func imageVirtualSize(head []byte) (int64, bool) {
	if len(head) >= 32 && bytes.Equal(head[:4], []byte{'Q', 'F', 'I', 0xfb}) {
		return int64(binary.BigEndian.Uint64(head[24:32])), true
	}
	if len(head) >= 20 && bytes.Equal(head[:4], []byte("KDMV")) {
		return int64(binary.LittleEndian.Uint64(head[12:20])) * 512, true
	}
	return 0, false
}

func readHead(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, 512)
	n, _ := io.ReadFull(f, b)
	return b[:n]
}

// storeFile records a downloaded or uploaded file as a volume. The caller holds s.mu.
func (s *Sim) storeFile(st *storage, nodeName, volid string, data []byte) {
	sid, volname, _ := splitVolID(volid)
	content, format, _, _ := classifyVolname(st, volname)
	n := nodeName
	if st.shared {
		n = ""
	}
	v := &volume{volid: volid, storage: sid, node: n, content: content, format: format, size: int64(len(data)), data: data}
	if vs, ok := imageVirtualSize(data); ok && (format == "qcow2" || format == "vmdk") {
		v.virtualSize = vs
	}
	s.putVolume(v)
}

// handleDownloadURL is POST /nodes/{node}/storage/{storage}/download-url (task download).
func (s *Sim) handleDownloadURL(c *call) (any, error) {
	st, filename, volid, dest, err := s.uploadTarget(c)
	if err != nil {
		return nil, err
	}
	nodeName := c.str("node")
	rawURL := c.str("url")
	algo, want := c.str("checksum-algorithm"), strings.ToLower(c.str("checksum"))
	verify := c.str("verify-certificates") != "0"
	compression, content := c.str("compression"), c.str("content")
	fetch := func(l taskLog) error {
		if compression != "" && content != "iso" {
			return fmt.Errorf("decompression not supported for %s", content)
		}
		s.mu.Lock()
		var existing *volume
		if v := s.lookupVolume(nodeName, volid); v != nil {
			cp := *v
			existing = &cp
		}
		s.mu.Unlock()
		if existing != nil {
			// PVE::Tools::download_file_from_url checks an existing destination first.
			if want == "" {
				return fmt.Errorf("refusing to override existing file '%s'", dest)
			}
			got, err := volumeHash(algo, *existing)
			if err != nil {
				return err
			}
			if got == want {
				l.printf("calculating checksum of existing file...OK, got correct file already, no need to download")
				return nil
			}
			return fmt.Errorf("checksum mismatch: got '%s' != expect '%s', aborting", got, want)
		}
		l.printf("downloading %s to %s", rawURL, dest)
		data, err := s.fetchURL(rawURL, verify, want != "")
		if err != nil {
			return err
		}
		if want != "" {
			got := hashBytes(algo, data)
			if got != want {
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, want)
			}
			l.printf("calculating checksum...OK, checksum verified")
		}
		if compression != "" {
			if data, err = decompress(data, compression); err != nil {
				return err
			}
		}
		l.printf("download of '%s' to '%s' finished", rawURL, dest)
		s.mu.Lock()
		s.storeFile(st, nodeName, volid, data)
		s.mu.Unlock()
		return nil
	}
	return s.spawn(&taskSpec{node: nodeName, typ: "download", id: encodeText(filename), user: c.user,
		fetch: fetch, work: func(taskLog) error { return nil }}), nil
}

// handleUpload is POST /nodes/{node}/storage/{storage}/upload (task imgcopy). The API is not proxied
// (proxyto is null), so the upload must reach the node named in the path directly.
func (s *Sim) handleUpload(c *call) (any, error) {
	if c.str("node") != c.local {
		return nil, dieErr("unable to proxy file uploads")
	}
	st, _, volid, dest, err := s.uploadTarget(c)
	if err != nil {
		return nil, err
	}
	if c.upload == nil {
		return nil, dieErr("upload failed: no file data")
	}
	data := c.upload
	nodeName := c.str("node")
	algo, want := c.str("checksum-algorithm"), strings.ToLower(c.str("checksum"))
	s.nextPID++
	tmp := fmt.Sprintf("/var/tmp/pveupload-%s", sha1Hex(fmt.Sprintf("%s:%d", volid, s.nextPID))[:32])
	return s.startTask(nodeName, "imgcopy", "", c.user, func(l taskLog) error {
		l.printf("starting file import from: %s", tmp)
		if want != "" {
			got := hashBytes(algo, data)
			if got != want {
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, want)
			}
			l.printf("calculating checksum...OK, checksum verified")
		}
		l.printf("target node: %s", nodeName)
		l.printf("target file: %s", dest)
		l.printf("file size is: %d", len(data))
		l.printf("command: cp -- %s %s", tmp, dest)
		l.printf("finished file import successfully")
		s.storeFile(st, nodeName, volid, data)
		return nil
	}), nil
}

// uploadFields are the form fields pve-http-server reads before the file part, in this order; a field out
// of order, or after the file part, is not seen.
var uploadFields = []string{"content", "checksum-algorithm", "checksum"}

// extractUpload parses a multipart/form-data upload as pve-http-server's file_upload_multipart does:
// the fields of uploadFields in order, then the file part named "filename" whose file name becomes the
// filename parameter; anything after the file part is ignored.
func extractUpload(r *http.Request, pathParams map[string]string) (map[string]value, []byte, *apiError) {
	ct, ctParams, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		p, err := extractParams(r, pathParams)
		return p, nil, err
	}
	params := map[string]value{}
	mr := multipart.NewReader(io.LimitReader(r.Body, 8<<30), ctParams["boundary"])
	next := 0
	var data []byte
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, &apiError{status: 400, msg: fmt.Sprintf("unable to parse multipart body: %v\n", err)}
		}
		name := part.FormName()
		if name == "filename" {
			b, err := io.ReadAll(part)
			if err != nil {
				return nil, nil, &apiError{status: 400, msg: fmt.Sprintf("unable to read upload: %v\n", err)}
			}
			data = b
			params["filename"] = value{s: part.FileName()}
			break
		}
		for i := next; i < len(uploadFields); i++ {
			if uploadFields[i] == name {
				b, _ := io.ReadAll(io.LimitReader(part, 4096))
				params[name] = value{s: strings.TrimRight(string(b), "\r\n")}
				next = i + 1
				break
			}
		}
	}
	for k, v := range r.URL.Query() {
		params[k] = value{s: strings.Join(v, "\x00")}
	}
	for k, v := range pathParams {
		params[k] = value{s: v}
	}
	return params, data, nil
}
