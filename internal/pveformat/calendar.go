package pveformat

import (
	"fmt"
	"strconv"
	"strings"
)

// Calendar events: the schedule of a backup job (PVE's format pve-calendar-event), a subset of systemd's
// calendar events as proxmox-time parses them:
//
//	[WEEKDAYS] [[YEARS-]MONTHS-DAYS] [HOURS:MINUTES[:SECONDS]]
//
// or one of minutely, hourly, daily, weekly, monthly, yearly (annually), quarterly, semiannually. Weekdays are
// names (mon or monday, any case), lists (mon,wed) and ranges (mon..fri). Every number field is a list of
// `*`, a value, a range (8..17) or a repetition (start/step, start..end/step, */step). A time of one field
// is minutes (*/5 is every five minutes). An event without a time runs at 00:00, one without a date every day.

// CalendarEventError is a refused calendar event: what is wrong and where, as a byte offset into the event.
type CalendarEventError struct {
	Event string
	// Pos is the byte offset of the refused part (0 for the whole event).
	Pos int
	Msg string
}

func (e *CalendarEventError) Error() string {
	return fmt.Sprintf("invalid calendar event %q: at character %d: %s", e.Event, e.Pos+1, e.Msg)
}

// calendarKeywords are the named events proxmox-time accepts.
var calendarKeywords = map[string]bool{
	"minutely": true, "hourly": true, "daily": true, "weekly": true, "monthly": true, "yearly": true,
	"annually": true, "quarterly": true, "semiannually": true, "semi-annually": true,
}

var weekdayNames = map[string]int{
	"mon": 1, "monday": 1, "tue": 2, "tuesday": 2, "wed": 3, "wednesday": 3, "thu": 4, "thursday": 4,
	"fri": 5, "friday": 5, "sat": 6, "saturday": 6, "sun": 7, "sunday": 7,
}

// calendarField is the name and the range of values of one number field.
type calendarField struct {
	name     string
	min, max int
}

var (
	fieldYear   = calendarField{"year", 1970, 9999}
	fieldMonth  = calendarField{"month", 1, 12}
	fieldDay    = calendarField{"day", 1, 31}
	fieldHour   = calendarField{"hour", 0, 23}
	fieldMinute = calendarField{"minute", 0, 59}
	fieldSecond = calendarField{"second", 0, 59}
)

// ValidateCalendarEvent checks a calendar event as PVE accepts it for a job's schedule; the error is a
// *CalendarEventError.
func ValidateCalendarEvent(event string) error {
	fail := func(pos int, format string, a ...any) error {
		return &CalendarEventError{Event: event, Pos: pos, Msg: fmt.Sprintf(format, a...)}
	}
	if strings.TrimSpace(event) == "" {
		return fail(0, "the event is empty")
	}
	toks := calendarTokens(event)
	if n := len(toks); n > 1 && strings.EqualFold(toks[n-1].text, "utc") {
		toks = toks[:n-1]
	}
	if len(toks) == 1 && calendarKeywords[strings.ToLower(toks[0].text)] {
		return nil
	}
	i := 0
	if i < len(toks) && isLetter(toks[i].text[0]) {
		if err := checkWeekdays(toks[i], fail); err != nil {
			return err
		}
		i++
	}
	if i < len(toks) && strings.Contains(toks[i].text, "-") {
		if err := checkDate(toks[i], fail); err != nil {
			return err
		}
		i++
	}
	if i < len(toks) {
		if err := checkTime(toks[i], fail); err != nil {
			return err
		}
		i++
	}
	if i < len(toks) {
		t := toks[i]
		if calendarKeywords[strings.ToLower(t.text)] {
			return fail(t.pos, "%q stands alone, it cannot follow other parts", t.text)
		}
		return fail(t.pos, "unexpected %q: an event is [weekdays] [[year-]month-day] [hour:minute[:second]], in that order", t.text)
	}
	return nil
}

type calendarToken struct {
	text string
	pos  int
}

// calendarTokens splits the event at white space, keeping each part's offset.
func calendarTokens(event string) []calendarToken {
	var out []calendarToken
	start := -1
	for i := 0; i <= len(event); i++ {
		space := i == len(event) || event[i] == ' ' || event[i] == '\t'
		switch {
		case space && start >= 0:
			out = append(out, calendarToken{event[start:i], start})
			start = -1
		case !space && start < 0:
			start = i
		}
	}
	return out
}

func isLetter(b byte) bool { return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') }

type failFunc func(pos int, format string, a ...any) error

// checkWeekdays checks a list of weekday names and ranges.
func checkWeekdays(t calendarToken, fail failFunc) error {
	if calendarKeywords[strings.ToLower(t.text)] {
		return fail(t.pos, "%q stands alone, it cannot be combined with other parts", t.text)
	}
	off := t.pos
	for _, item := range strings.Split(t.text, ",") {
		if item == "" {
			return fail(off, "empty weekday in the list")
		}
		from, to, isRange := strings.Cut(item, "..")
		a, ok := weekdayNames[strings.ToLower(from)]
		if !ok {
			return fail(off, "unknown weekday %q (want mon, tue, wed, thu, fri, sat or sun)", from)
		}
		if isRange {
			b, ok := weekdayNames[strings.ToLower(to)]
			if !ok {
				return fail(off+len(from)+2, "unknown weekday %q (want mon, tue, wed, thu, fri, sat or sun)", to)
			}
			if b < a {
				return fail(off, "weekday range %q ends before it starts", item)
			}
		}
		off += len(item) + 1
	}
	return nil
}

// checkDate checks [years-]months-days.
func checkDate(t calendarToken, fail failFunc) error {
	parts := strings.Split(t.text, "-")
	fields := []calendarField{fieldMonth, fieldDay}
	switch len(parts) {
	case 2:
	case 3:
		fields = []calendarField{fieldYear, fieldMonth, fieldDay}
	default:
		return fail(t.pos, "a date is [year-]month-day, not %q", t.text)
	}
	return checkParts(parts, t.pos, fields, fail)
}

// checkTime checks hours:minutes[:seconds], or minutes alone.
func checkTime(t calendarToken, fail failFunc) error {
	if calendarKeywords[strings.ToLower(t.text)] {
		return fail(t.pos, "%q stands alone, it cannot be combined with other parts", t.text)
	}
	parts := strings.Split(t.text, ":")
	var fields []calendarField
	switch len(parts) {
	case 1:
		fields = []calendarField{fieldMinute}
	case 2:
		fields = []calendarField{fieldHour, fieldMinute}
	case 3:
		fields = []calendarField{fieldHour, fieldMinute, fieldSecond}
	default:
		return fail(t.pos, "a time is hour:minute[:second], not %q", t.text)
	}
	return checkParts(parts, t.pos, fields, fail)
}

// checkParts checks the separated parts of a date or a time, which starts at off, each as a number list of
// its field.
func checkParts(parts []string, off int, fields []calendarField, fail failFunc) error {
	for i, p := range parts {
		if err := checkNumberList(p, off, fields[i], fail); err != nil {
			return err
		}
		off += len(p) + 1
	}
	return nil
}

// checkNumberList checks a comma-separated list of *, values, ranges and repetitions of one field.
func checkNumberList(s string, off int, f calendarField, fail failFunc) error {
	if s == "" {
		return fail(off, "the %s is empty", f.name)
	}
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return fail(off, "empty %s in the list", f.name)
		}
		if err := checkNumberItem(item, off, f, fail); err != nil {
			return err
		}
		off += len(item) + 1
	}
	return nil
}

func checkNumberItem(item string, off int, f calendarField, fail failFunc) error {
	base, step, repeat := strings.Cut(item, "/")
	if repeat {
		n, err := strconv.Atoi(step)
		if err != nil || !isDigits(step) {
			return fail(off+len(base)+1, "the repetition of the %s must be a number, not %q", f.name, step)
		}
		if n == 0 {
			return fail(off+len(base)+1, "the repetition of the %s must not be 0", f.name)
		}
	}
	if base == "*" {
		return nil
	}
	from, to, isRange := strings.Cut(base, "..")
	a, err := calendarNumber(from, off, f, fail)
	if err != nil {
		return err
	}
	if !isRange {
		return nil
	}
	b, err := calendarNumber(to, off+len(from)+2, f, fail)
	if err != nil {
		return err
	}
	if b < a {
		return fail(off, "%s range %q ends before it starts", f.name, base)
	}
	return nil
}

func calendarNumber(s string, off int, f calendarField, fail failFunc) (int, error) {
	if !isDigits(s) || len(s) > 4 {
		if s == "*" {
			return 0, fail(off, "* cannot be part of a %s range", f.name)
		}
		return 0, fail(off, "%q is not a %s", s, f.name)
	}
	n, _ := strconv.Atoi(s)
	if n < f.min || n > f.max {
		return 0, fail(off, "%s %d is out of range %d..%d", f.name, n, f.min, f.max)
	}
	return n, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
