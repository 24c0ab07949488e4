package pveformat

import "testing"

func TestMarkCommentAppendsTheMarkerAndCommentTextRemovesIt(t *testing.T) {
	for _, text := range []string{"", "web servers", "line one\nline two", "a [proxops]-like word"} {
		c := MarkComment(text)
		if !Marked(c) {
			t.Errorf("MarkComment(%q) = %q: not marked", text, c)
		}
		if got := CommentText(c); got != text {
			t.Errorf("CommentText(MarkComment(%q)) = %q", text, got)
		}
	}
	if got := MarkComment(""); got != "[proxops]" {
		t.Errorf("MarkComment(\"\") = %q, want the marker alone", got)
	}
	if got := MarkComment("web"); got != "web [proxops]" {
		t.Errorf("MarkComment(web) = %q", got)
	}
}

func TestTheMarkerSurvivesEditsOfTheRestOfTheComment(t *testing.T) {
	cases := []struct {
		comment string
		marked  bool
		text    string
	}{
		{"web [proxops]", true, "web"},
		{"web servers, edited by hand [proxops]", true, "web servers, edited by hand"},
		{"[proxops] moved to the front", true, "moved to the front"},
		{"first line\n[proxops]\n", true, "first line"},
		{"first line [proxops]\nsecond line", true, "first line\nsecond line"},
		{"web", false, "web"},
		{"web [proxops]x", false, "web [proxops]x"},
		{"web proxops", false, "web proxops"},
		{"", false, ""},
	}
	for _, c := range cases {
		if got := Marked(c.comment); got != c.marked {
			t.Errorf("Marked(%q) = %v, want %v", c.comment, got, c.marked)
		}
		if got := CommentText(c.comment); got != c.text {
			t.Errorf("CommentText(%q) = %q, want %q", c.comment, got, c.text)
		}
	}
}
