package pveformat_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pveformat"
)

// The accepted events are the examples of PVE's documentation (the "Schedule Format" appendix) and the
// forms its backup dialog offers.
func TestCalendarEventAcceptsPVEsExamples(t *testing.T) {
	for _, ev := range []string{
		"mon,tue,wed,thu,fri", "sat,sun", "mon,wed,fri", "12:05", "*/5", "mon..wed 30/10",
		"mon..fri 8..17,22:0/15", "fri 12..13:5/20", "12,14,16,18,20,22:5", "*", "*-05", "Sat *-1..7 15:00",
		"2015-10-21", "21:00", "sun 01:00", "mon..fri 02:30", "*-*-01 00:00", "hourly", "daily", "weekly",
		"monthly", "yearly", "minutely", "quarterly", "tue 23:00:30", "*:0/15", "mon,wed..fri 4:00",
		"2024..2030-1,7-1 03:00", "daily UTC", "Monday 10:00",
	} {
		if err := pveformat.ValidateCalendarEvent(ev); err != nil {
			t.Errorf("%q refused: %v", ev, err)
		}
	}
}

func TestCalendarEventRefusesWithThePosition(t *testing.T) {
	for _, tc := range []struct {
		event, msg string
		pos        int
	}{
		{"", "empty", 0},
		{"   ", "empty", 0},
		{"someday", `unknown weekday "someday"`, 0},
		{"mon..xyz", `unknown weekday "xyz"`, 5},
		{"fri..mon", "ends before it starts", 0},
		{"25:00", "hour 25 is out of range 0..23", 0},
		{"12:60", "minute 60 is out of range 0..59", 3},
		{"12:00:61", "second 61 is out of range", 6},
		{"*-13-01", "month 13 is out of range 1..12", 2},
		{"*-02-32", "day 32 is out of range 1..31", 5},
		{"*/0", "must not be 0", 2},
		{"*/x", "must be a number", 2},
		{"1:2:3:4", "a time is hour:minute", 0},
		{"1-2-3-4", "a date is [year-]month-day", 0},
		{"mon 12:00 tue", `unexpected "tue"`, 10},
		{"mon daily", "stands alone", 4},
		{"daily 12:00", "stands alone", 0},
		{"10..5:00", "hour range \"10..5\" ends before it starts", 0},
		{"12:,5", "empty minute", 3},
		{"1,,2:00", "empty hour", 2},
		{"12:ab", `"ab" is not a minute`, 3},
		{"mon,,tue", "empty weekday", 4},
		{"1969-01-01", "year 1969 is out of range", 0},
	} {
		err := pveformat.ValidateCalendarEvent(tc.event)
		var ce *pveformat.CalendarEventError
		if !errors.As(err, &ce) {
			t.Errorf("%q accepted or wrong error type: %v", tc.event, err)
			continue
		}
		if !strings.Contains(ce.Msg, tc.msg) || ce.Pos != tc.pos {
			t.Errorf("%q: got pos %d %q, want pos %d containing %q", tc.event, ce.Pos, ce.Msg, tc.pos, tc.msg)
		}
	}
}

func TestCalendarEventErrorNamesTheEventAndColumn(t *testing.T) {
	err := pveformat.ValidateCalendarEvent("mon 25:00")
	want := `invalid calendar event "mon 25:00": at character 5: hour 25 is out of range 0..23`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// FuzzValidateCalendarEvent: the validator never panics, and a refusal points inside the event or just past
// its end (where something is missing).
func FuzzValidateCalendarEvent(f *testing.F) {
	for _, s := range []string{"mon..fri 8..17,22:0/15", "*-05", "Sat *-1..7 15:00", "hourly", "*/5", "1-2-3", "a..b/0", ":,:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := pveformat.ValidateCalendarEvent(s)
		var ce *pveformat.CalendarEventError
		if err == nil {
			return
		}
		if !errors.As(err, &ce) {
			t.Fatalf("%q: error of type %T", s, err)
		}
		if ce.Pos < 0 || ce.Pos > len(s) {
			t.Fatalf("%q: position %d outside the event", s, ce.Pos)
		}
	})
}
