package unbounded

import (
	web "net/http"
	"net/http/httptest"
)

func servers(h web.Handler) {
	_ = &web.Server{Handler: h}
	_ = new(web.Server)
	_ = web.ListenAndServe(":0", h)
	_ = httptest.NewServer(h)
	var s web.Server
	_ = s
}
