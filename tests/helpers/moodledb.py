"""Moodle's log table in a real PostgreSQL, for the Moodle source tests (here and under systemd)."""

import datetime as dt
import json

from helpers.project import Project

SITE = "https://moodle.example.edu"
# The tables the reader may read: SELECT on these and nothing else (docs/sources/moodle.md lists the same).
READER_TABLES = ("mdl_logstore_standard_log", "mdl_grade_items", "mdl_course", "mdl_course_categories", "mdl_enrol",
                 "mdl_user_enrolments", "mdl_role", "mdl_context", "mdl_role_assignments")
READER, READER_PASSWORD = "moodle_reader", "moodle-secret"

# logstore_standard_log as Moodle's installer creates it on PostgreSQL, from
# admin/tool/log/store/standard/db/install.xml: int(10) is BIGINT, int(1) SMALLINT,
# char NOT NULL gets DEFAULT '', and the index names are Moodle's generated ones.
MOODLE_DDL = """
CREATE TABLE mdl_logstore_standard_log (
    id BIGSERIAL,
    eventname VARCHAR(255) NOT NULL DEFAULT '',
    component VARCHAR(100) NOT NULL DEFAULT '',
    action VARCHAR(100) NOT NULL DEFAULT '',
    target VARCHAR(100) NOT NULL DEFAULT '',
    objecttable VARCHAR(50),
    objectid BIGINT,
    crud VARCHAR(1) NOT NULL DEFAULT '',
    edulevel SMALLINT NOT NULL,
    contextid BIGINT NOT NULL,
    contextlevel BIGINT NOT NULL,
    contextinstanceid BIGINT NOT NULL,
    userid BIGINT NOT NULL,
    courseid BIGINT,
    relateduserid BIGINT,
    anonymous SMALLINT NOT NULL DEFAULT 0,
    other TEXT,
    timecreated BIGINT NOT NULL,
    origin VARCHAR(10),
    ip VARCHAR(45),
    realuserid BIGINT,
    CONSTRAINT mdl_logsstanlog_id_pk PRIMARY KEY (id)
);
CREATE INDEX mdl_logsstanlog_tim_ix ON mdl_logstore_standard_log (timecreated);
CREATE INDEX mdl_logsstanlog_couanotim_ix ON mdl_logstore_standard_log (courseid, anonymous, timecreated);
CREATE INDEX mdl_logsstanlog_useconconcr_ix
    ON mdl_logstore_standard_log (userid, contextlevel, contextinstanceid, crud, edulevel, timecreated);
"""

# grade_items: the columns the source reads and a few that identify an item, typed as
# Moodle's installer types them on PostgreSQL (number(10,5) is NUMERIC(10,5)).
GRADE_ITEMS_DDL = """
CREATE TABLE mdl_grade_items (
    id BIGSERIAL,
    courseid BIGINT,
    itemname VARCHAR(255),
    itemtype VARCHAR(30) NOT NULL DEFAULT '',
    itemmodule VARCHAR(30),
    iteminstance BIGINT,
    gradetype SMALLINT NOT NULL DEFAULT 1,
    grademax NUMERIC(10,5) NOT NULL DEFAULT 100,
    grademin NUMERIC(10,5) NOT NULL DEFAULT 0,
    CONSTRAINT mdl_gradite_id_pk PRIMARY KEY (id)
);
"""

# config_plugins as Moodle's installer creates it on PostgreSQL; created (and granted) only by a test that sets
# loglifetime: the source needs no SELECT on it (it holds every plugin's settings, secrets among them).
CONFIG_PLUGINS_DDL = """
CREATE TABLE mdl_config_plugins (
    id BIGSERIAL,
    plugin VARCHAR(100) NOT NULL DEFAULT 'core',
    name VARCHAR(100) NOT NULL DEFAULT '',
    value TEXT NOT NULL,
    CONSTRAINT mdl_confplug_id_pk PRIMARY KEY (id)
)
"""

# course and course_categories as Moodle's installer creates them on PostgreSQL (lib/db/install.xml:
# int(10) is BIGINT, int(5) INTEGER, int(1..4) SMALLINT, char NOT NULL gets DEFAULT ''), with
# Moodle's index names. The source reads fullname, shortname, startdate, enddate, category and the
# category's name; the other columns are there so that it is read as Moodle has it.
COURSE_DDL = """
CREATE TABLE mdl_course (
    id BIGSERIAL,
    category BIGINT NOT NULL DEFAULT 0,
    sortorder BIGINT NOT NULL DEFAULT 0,
    fullname VARCHAR(1333) NOT NULL DEFAULT '',
    shortname VARCHAR(255) NOT NULL DEFAULT '',
    idnumber VARCHAR(100) NOT NULL DEFAULT '',
    summary TEXT,
    summaryformat SMALLINT NOT NULL DEFAULT 0,
    format VARCHAR(21) NOT NULL DEFAULT 'topics',
    showgrades SMALLINT NOT NULL DEFAULT 1,
    newsitems INTEGER NOT NULL DEFAULT 1,
    startdate BIGINT NOT NULL DEFAULT 0,
    enddate BIGINT NOT NULL DEFAULT 0,
    relativedatesmode SMALLINT NOT NULL DEFAULT 0,
    marker BIGINT NOT NULL DEFAULT 0,
    maxbytes BIGINT NOT NULL DEFAULT 0,
    legacyfiles SMALLINT NOT NULL DEFAULT 0,
    showreports SMALLINT NOT NULL DEFAULT 0,
    visible SMALLINT NOT NULL DEFAULT 1,
    visibleold SMALLINT NOT NULL DEFAULT 1,
    downloadcontent SMALLINT,
    groupmode SMALLINT NOT NULL DEFAULT 0,
    groupmodeforce SMALLINT NOT NULL DEFAULT 0,
    defaultgroupingid BIGINT NOT NULL DEFAULT 0,
    lang VARCHAR(30) NOT NULL DEFAULT '',
    calendartype VARCHAR(30) NOT NULL DEFAULT '',
    theme VARCHAR(50) NOT NULL DEFAULT '',
    timecreated BIGINT NOT NULL DEFAULT 0,
    timemodified BIGINT NOT NULL DEFAULT 0,
    requested SMALLINT NOT NULL DEFAULT 0,
    enablecompletion SMALLINT NOT NULL DEFAULT 0,
    completionnotify SMALLINT NOT NULL DEFAULT 0,
    cacherev BIGINT NOT NULL DEFAULT 0,
    originalcourseid BIGINT,
    showactivitydates SMALLINT NOT NULL DEFAULT 0,
    showcompletionconditions SMALLINT,
    pdfexportfont VARCHAR(50),
    CONSTRAINT mdl_cour_id_pk PRIMARY KEY (id)
);
CREATE INDEX mdl_cour_cat_ix ON mdl_course (category);
CREATE INDEX mdl_cour_idn_ix ON mdl_course (idnumber);
CREATE INDEX mdl_cour_sho_ix ON mdl_course (shortname);
CREATE INDEX mdl_cour_sor_ix ON mdl_course (sortorder);
CREATE TABLE mdl_course_categories (
    id BIGSERIAL,
    name VARCHAR(255) NOT NULL DEFAULT '',
    idnumber VARCHAR(100),
    description TEXT,
    descriptionformat SMALLINT NOT NULL DEFAULT 0,
    parent BIGINT NOT NULL DEFAULT 0,
    sortorder BIGINT NOT NULL DEFAULT 0,
    coursecount BIGINT NOT NULL DEFAULT 0,
    visible SMALLINT NOT NULL DEFAULT 1,
    visibleold SMALLINT NOT NULL DEFAULT 1,
    timemodified BIGINT NOT NULL DEFAULT 0,
    depth BIGINT NOT NULL DEFAULT 0,
    path VARCHAR(255) NOT NULL DEFAULT '',
    theme VARCHAR(50),
    CONSTRAINT mdl_courcate_id_pk PRIMARY KEY (id)
);
-- The installer's first course: the site (front page), id 1, in no category.
INSERT INTO mdl_course (id, category, fullname, shortname, format) VALUES (1, 0, 'Moodle Site', 'moodle', 'site');
SELECT setval('mdl_course_id_seq', 1);
"""

# The enrolment tables as Moodle's installer creates them on PostgreSQL (lib/db/install.xml), with its index names and
# its standard roles (the installer's ids): user_enrolments.timeend defaults to 2147483647, as Moodle's does.
ENROLMENT_DDL = """
CREATE TABLE mdl_enrol (
    id BIGSERIAL,
    enrol VARCHAR(20) NOT NULL DEFAULT '',
    status BIGINT NOT NULL DEFAULT 0,
    courseid BIGINT NOT NULL,
    sortorder BIGINT NOT NULL DEFAULT 0,
    name VARCHAR(255),
    enrolperiod BIGINT DEFAULT 0,
    enrolstartdate BIGINT DEFAULT 0,
    enrolenddate BIGINT DEFAULT 0,
    roleid BIGINT DEFAULT 0,
    timecreated BIGINT NOT NULL DEFAULT 0,
    timemodified BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT mdl_enro_id_pk PRIMARY KEY (id)
);
CREATE INDEX mdl_enro_enr_ix ON mdl_enrol (enrol);
CREATE INDEX mdl_enro_cou_ix ON mdl_enrol (courseid);
CREATE TABLE mdl_user_enrolments (
    id BIGSERIAL,
    status BIGINT NOT NULL DEFAULT 0,
    enrolid BIGINT NOT NULL,
    userid BIGINT NOT NULL,
    timestart BIGINT NOT NULL DEFAULT 0,
    timeend BIGINT NOT NULL DEFAULT 2147483647,
    modifierid BIGINT NOT NULL DEFAULT 0,
    timecreated BIGINT NOT NULL DEFAULT 0,
    timemodified BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT mdl_userenro_id_pk PRIMARY KEY (id)
);
CREATE UNIQUE INDEX mdl_userenro_enruse_uix ON mdl_user_enrolments (enrolid, userid);
CREATE INDEX mdl_userenro_enr_ix ON mdl_user_enrolments (enrolid);
CREATE INDEX mdl_userenro_use_ix ON mdl_user_enrolments (userid);
CREATE INDEX mdl_userenro_mod_ix ON mdl_user_enrolments (modifierid);
CREATE TABLE mdl_role (
    id BIGSERIAL,
    name VARCHAR(255) NOT NULL DEFAULT '',
    shortname VARCHAR(100) NOT NULL DEFAULT '',
    description TEXT NOT NULL,
    sortorder BIGINT NOT NULL DEFAULT 0,
    archetype VARCHAR(30) NOT NULL DEFAULT '',
    CONSTRAINT mdl_role_id_pk PRIMARY KEY (id)
);
CREATE UNIQUE INDEX mdl_role_sor_uix ON mdl_role (sortorder);
CREATE UNIQUE INDEX mdl_role_sho_uix ON mdl_role (shortname);
CREATE TABLE mdl_context (
    id BIGSERIAL,
    contextlevel BIGINT NOT NULL DEFAULT 0,
    instanceid BIGINT NOT NULL DEFAULT 0,
    path VARCHAR(255),
    depth SMALLINT NOT NULL DEFAULT 0,
    locked SMALLINT NOT NULL DEFAULT 0,
    CONSTRAINT mdl_cont_id_pk PRIMARY KEY (id)
);
CREATE UNIQUE INDEX mdl_cont_conins_uix ON mdl_context (contextlevel, instanceid);
CREATE TABLE mdl_role_assignments (
    id BIGSERIAL,
    roleid BIGINT NOT NULL DEFAULT 0,
    contextid BIGINT NOT NULL DEFAULT 0,
    userid BIGINT NOT NULL DEFAULT 0,
    timemodified BIGINT NOT NULL DEFAULT 0,
    modifierid BIGINT NOT NULL DEFAULT 0,
    component VARCHAR(100) NOT NULL DEFAULT '',
    itemid BIGINT NOT NULL DEFAULT 0,
    sortorder BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT mdl_roleassi_id_pk PRIMARY KEY (id)
);
CREATE INDEX mdl_roleassi_rolcon_ix ON mdl_role_assignments (roleid, contextid);
CREATE INDEX mdl_roleassi_useconrol_ix ON mdl_role_assignments (userid, contextid, roleid);
CREATE INDEX mdl_roleassi_con_ix ON mdl_role_assignments (contextid);
INSERT INTO mdl_role (id, shortname, description, sortorder, archetype) VALUES (1, 'manager', '', 1, 'manager'),
    (2, 'coursecreator', '', 2, 'coursecreator'), (3, 'editingteacher', '', 3, 'editingteacher'),
    (4, 'teacher', '', 4, 'teacher'), (5, 'student', '', 5, 'student'), (6, 'guest', '', 6, 'guest');
"""
ENROLMENT_TABLES = ("mdl_enrol", "mdl_user_enrolments", "mdl_role", "mdl_context", "mdl_role_assignments")
COURSE_CONTEXT = 50
ROLES = {"manager": 1, "editingteacher": 3, "teacher": 4, "student": 5}


class Enrolments:
    """Enrolling users in courses as Moodle does, for the helpers of both databases (their `insert` and `sql`).
    Each course gets one manual enrolment method and its context on first use; returns the user_enrolments id."""

    def enrol(self, user, course, *, role="student", start=0, end=0, status=0, method_status=0, modified=0):
        method = self._method(course, method_status)
        context = self._context(course)
        enrolment = self.insert("mdl_user_enrolments", {"status": status, "enrolid": method, "userid": user,
                                                        "timestart": start, "timeend": end,
                                                        "timemodified": modified})
        self.insert("mdl_role_assignments", {"roleid": ROLES.get(role, role), "contextid": context, "userid": user})
        return enrolment

    def edit_enrolment(self, enrolment, **columns):
        """Change a user_enrolments row as Moodle's enrolment editing does (timestart, timeend, status)."""
        for column, value in columns.items():
            self.sql(f"UPDATE mdl_user_enrolments SET {column} = {int(value)} WHERE id = {int(enrolment)}")

    def unenrol(self, enrolment):
        self.sql(f"DELETE FROM mdl_user_enrolments WHERE id = {int(enrolment)}")

    def role(self, number, shortname, archetype):
        self.insert("mdl_role", {"id": number, "shortname": shortname, "description": "", "sortorder": number,
                                 "archetype": archetype})

    def _method(self, course, status):
        known = self.sql(f"SELECT id FROM mdl_enrol WHERE courseid = {int(course)} AND status = {int(status)}")
        if known:
            return known[0][0]
        return self.insert("mdl_enrol", {"enrol": "manual", "status": status, "courseid": course, "roleid": 5})

    def _context(self, course):
        known = self.sql(f"SELECT id FROM mdl_context WHERE contextlevel = {COURSE_CONTEXT} AND instanceid = "
                         f"{int(course)}")
        if known:
            return known[0][0]
        return self.insert("mdl_context", {"contextlevel": COURSE_CONTEXT, "instanceid": course, "depth": 3})


# eventname -> (component, action, target, crud, edulevel), as Moodle logs them
KINDS = {
    "viewed": ("\\core\\event\\course_viewed", "core", "viewed", "course", "r", 2),
    "page": ("\\mod_page\\event\\course_module_viewed", "mod_page", "viewed", "course_module", "r", 2),
    "quiz": ("\\mod_quiz\\event\\attempt_submitted", "mod_quiz", "submitted", "attempt", "u", 2),
    "assign": ("\\mod_assign\\event\\assessable_submitted", "mod_assign", "submitted", "assessable", "u", 2),
    "cm_completion": ("\\core\\event\\course_module_completion_updated", "core", "updated",
                      "course_module_completion", "u", 2),
    "course_completed": ("\\core\\event\\course_completed", "core", "completed", "course", "u", 2),
    "graded": ("\\core\\event\\user_graded", "core", "graded", "user", "u", 1),
    "module_created": ("\\core\\event\\course_module_created", "core", "created", "course_module", "c", 1),
    "loggedin": ("\\core\\event\\user_loggedin", "core", "loggedin", "user", "r", 0),
    "feedback": ("\\mod_feedback\\event\\response_submitted", "mod_feedback", "submitted", "response", "c", 2),
}


def unix(text):
    return int(dt.datetime.fromisoformat(text).timestamp())


class MoodleDatabase(Enrolments):
    def __init__(self, server):
        self.server = server
        self.name = server.new_database()
        server.admin(MOODLE_DDL + GRADE_ITEMS_DDL + COURSE_DDL + ENROLMENT_DDL, self.name)
        # Exactly the grants of docs/sources/moodle.md (tests/documentation holds them to it).
        server.admin(f"GRANT SELECT ON {', '.join(READER_TABLES)} TO {READER}", self.name)

    def insert(self, table, values):
        """Insert one row of literal values; return its id."""
        literals = ", ".join(str(value) if isinstance(value, int) else _literal(value) for value in values.values())
        return self.sql(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({literals}) RETURNING id")[0][0]

    @property
    def url(self):
        return f"postgresql://{READER}@127.0.0.1:{self.server.port}/{self.name}"

    def log(self, kind, user, course, at, related=None, other=None, anonymous=0, realuser=None, id=None):
        """Insert one log row the way Moodle writes it; `id` set by hand simulates a late commit."""
        values = log_values(kind, user, course, at, related, other, anonymous, realuser, id)
        columns = ", ".join(values)
        literals = ", ".join("NULL" if v is None else str(v) if isinstance(v, int) else "'" + v.replace("'", "''") + "'"
                             for v in values.values())
        return self.server.admin(f"INSERT INTO mdl_logstore_standard_log ({columns}) VALUES ({literals}) RETURNING id",
                                 self.name)[0][0]

    def sql(self, statement):
        """Run a statement as the server's administrator in this database; return its rows, if any."""
        return self.server.admin(statement, self.name)

    def grant(self, privilege, *tables):
        self.sql(f"GRANT {privilege} ON {', '.join(tables)} TO {READER}")

    def revoke(self, privilege, *tables):
        self.sql(f"REVOKE {privilege} ON {', '.join(tables)} FROM {READER}")

    def log_lifetime(self, days):
        """Set Moodle's logstore_standard loglifetime (as its admin page does) and let the reader read it."""
        self.sql(CONFIG_PLUGINS_DDL)
        self.sql(f"INSERT INTO mdl_config_plugins (plugin, name, value) VALUES ('logstore_standard', 'loglifetime', "
                 f"'{days}')")
        self.grant("SELECT", "mdl_config_plugins")

    def category(self, number, name, parent=0, path=None):
        """Insert a category as Moodle does: its path the ids from the top down ("/1/4/7"), a top one's "/N"."""
        path = path or f"/{number}"
        self.server.admin(f"INSERT INTO mdl_course_categories (id, name, parent, path, depth) VALUES ({number}, "
                          f"{_literal(name)}, {parent}, {_literal(path)}, {path.count('/')})", self.name)

    def course(self, number, fullname, shortname, category=0, startdate=0, enddate=0):
        """Insert a course as Moodle's course creation does (the columns the source reads, and the rest's defaults)."""
        self.server.admin(f"INSERT INTO mdl_course (id, category, fullname, shortname, startdate, enddate) VALUES "
                          f"({number}, {category}, {_literal(fullname)}, {_literal(shortname)}, {startdate}, "
                          f"{enddate})", self.name)

    def rename(self, number, fullname):
        self.server.admin(f"UPDATE mdl_course SET fullname = {_literal(fullname)} WHERE id = {number}", self.name)

    def grade_item(self, item, course, grademin, grademax):
        self.server.admin(f"INSERT INTO mdl_grade_items (id, courseid, itemname, itemtype, itemmodule, grademin, "
                          f"grademax) VALUES ({item}, {course}, 'Quiz', 'mod', 'quiz', {grademin}, {grademax})",
                          self.name)


def log_values(kind, user, course, at, related=None, other=None, anonymous=0, realuser=None, id=None):
    """The columns of one log row as Moodle writes it ({column: value}; `other` is JSON, or text as given)."""
    eventname, component, action, target, crud, edulevel = KINDS[kind]
    values = {
        "eventname": eventname, "component": component, "action": action, "target": target, "crud": crud,
        "edulevel": edulevel, "contextid": 100 + (course or 0), "contextlevel": 50,
        "contextinstanceid": course or 0,
        "userid": user, "courseid": course, "relateduserid": related, "anonymous": anonymous,
        "other": other if isinstance(other, str) else json.dumps(other) if other is not None else "null",
        "timecreated": unix(at), "origin": "web", "ip": "192.0.2.1", "realuserid": realuser,
    }
    if id is not None:
        values["id"] = id
    return values


def _literal(text):
    return "'" + text.replace("'", "''") + "'"


def completion(state, user):
    return {"relateduserid": user, "overrideby": None, "completionstate": state}


def course_iri(course):
    return f"{SITE}/course/view.php?id={course}"


def load_two_days(m):
    """Rows for two local days in two courses, with every kind of row the mapping excludes."""
    a = "2026-11-23T10:00:00+01:00"
    m.log("viewed", 101, 7, a)
    m.log("quiz", 101, 7, a, related=101)
    m.log("quiz", 102, 7, a, related=102)
    m.log("assign", 102, 7, a)
    m.log("cm_completion", 103, 7, a, related=103, other=completion(1, 103))
    m.log("cm_completion", 101, 7, a, related=101, other=completion(2, 101))
    m.grade_item(5, 7, grademin=0, grademax=10)
    m.log("graded", 900, 7, a, related=102, other={"itemid": 5, "overridden": False, "finalgrade": 8.0})
    # Not learner activity: a teacher's edit, anonymous feedback, not logged in, the guest,
    # "logged in as", the site course, a site-level login.
    m.log("module_created", 900, 7, a)
    m.log("feedback", 104, 7, a, anonymous=1)
    m.log("viewed", 0, 7, a)
    m.log("viewed", 1, 7, a)
    m.log("viewed", 105, 7, a, realuser=2)
    m.log("viewed", 101, 1, a)
    m.log("loggedin", 101, 0, a)
    b = "2026-11-24T09:00:00+01:00"
    m.log("cm_completion", 201, 9, b, related=201, other=completion(3, 201))
    m.log("course_completed", 202, 9, b, related=202)
    m.log("page", 203, 9, "2026-11-23T23:30:00+00:00")  # 00:30 on the 24th in Paris


EXPECTED_TWO_DAYS = [
    # day, course, learners, statements, attempts, completions, passed, failed, score, duration, suppressed, then
    # completed, passed and failed learners, completed share, pass rate, then enrolled learners, active share.
    # On the 23rd, one graded learner (0.8): fewer than 2, so the average score is suppressed too.
    # No learner is enrolled: enrolled_learners and active_share are NULL.
    ("2026-11-23", course_iri(7), 3, 7, 3, 2, None, 0, None, None, 1, 2, None, 0, 2 / 3, None,  # one passed < 2
     None, None),
    ("2026-11-24", course_iri(9), 3, 3, 0, 2, 0, None, None, None, 1, 2, 0, None, 2 / 3, None,  # one failed < 2
     None, None),
]


def moodle_project(root, moodle, reader_password, postgres=None, **settings):
    source = {"type": "moodle", "url": moodle.url, "password_file": reader_password, "site_url": SITE,
              "id_lookback": 50, "batch_size": 3}  # tiny pages, so paging is exercised
    source.update(settings)
    project = Project(root, postgres, source=source)
    project.configure(extra_top="min_cell_size = 2")
    return project
